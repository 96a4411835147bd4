"""Structured output through a real uvicorn server and the official openai client: JSON
Schemas (response_format), GBNF grammars (/completion), tool calls, and 400s for what cannot
be compiled -- all on SmolLM2, greedy."""
from __future__ import annotations

import datetime
import json
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import pytest
from pydantic import BaseModel, Field
from server_harness import serving_state, step_all, uvicorn_server
from structured_cases import GRAMMARS, SCHEMAS, TIME, WEATHER

from llamapy import Context, ContextParams
from llamapy.grammar import GrammarSpec
from llamapy.sampling import SamplingParams
from llamapy.server.request import Event, Request
from llamapy.server.scheduler import Scheduler

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow

SYSTEM = {"role": "system", "content": "Reply with JSON only."}
FREE = ["Tell me about the moon.", "Write a haiku about rain.", "What is a bicycle?", "Name a famous painter."]


def _client(base: str):
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)


def _validate(text: str, schema: dict) -> None:
    """Parses, validates (formats included), and checks date-time strings strictly."""
    obj = json.loads(text)
    jsonschema.validate(obj, schema, format_checker=jsonschema.FormatChecker())

    def walk(s: dict, v) -> None:
        if s.get("format") == "date-time":
            datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
        for k, sub in s.get("properties", {}).items():
            if isinstance(v, dict) and k in v:
                walk(sub, v[k])
    walk(schema, obj)


def _schema_request(client, prompt: str, schema: dict) -> tuple[str, str]:
    r = client.chat.completions.create(
        model="m", messages=[SYSTEM, {"role": "user", "content": prompt}], temperature=0, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}})
    return r.choices[0].message.content, r.choices[0].finish_reason


def _free_request(client, prompt: str) -> str:
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=40)
    assert r.choices[0].finish_reason in ("stop", "length")
    return r.choices[0].message.content


@pytest.fixture(scope="module")
def server(smollm2):
    with serving_state(smollm2, n_ctx=8192, np_=8, n_batch=256) as st, uvicorn_server(st) as base:
        yield st, base


def test_twenty_schemas_alone(server):
    st, base = server
    client = _client(base)
    for prompt, schema in SCHEMAS:
        text, finish = _schema_request(client, prompt, schema)
        assert finish == "stop", (prompt, text)
        _validate(text, schema)


def test_schemas_concurrent_with_free_requests(server):
    """8 at a time over HTTP, constrained and free mixed: every constrained output validates
    and every free request ends normally (their identity with an unconstrained server is
    checked below, where the batches can be made the same)."""
    st, base = server
    client = _client(base)
    jobs = []
    with ThreadPoolExecutor(8) as ex:
        for i in range(0, len(SCHEMAS), 4):
            for k, (prompt, schema) in enumerate(SCHEMAS[i : i + 4]):
                jobs.append((schema, ex.submit(_schema_request, client, prompt, schema)))
                jobs.append((None, ex.submit(_free_request, client, FREE[k])))
        for schema, fut in jobs:
            if schema is None:
                assert fut.result()
                continue
            text, finish = fut.result()
            assert finish == "stop", text
            _validate(text, schema)


def _step_all(model, reqs: list[Request]) -> list[list[Event]]:
    """Submit all, then step the scheduler synchronously: the same requests always make the
    same batches."""
    ctx = Context(model, ContextParams(n_ctx=8 * 512, n_batch=256, n_ubatch=256, n_seq_max=8, kv_unified=False))
    sched = Scheduler(ctx)
    evs: list[list[Event]] = []
    for r in reqs:
        ev: list[Event] = []
        r.sink = ev.append
        sched.submit(r)
        evs.append(ev)
    step_all(sched, evs)
    return evs


def test_constraints_do_not_touch_other_rows(server, smollm2):
    """Four constrained and four free requests decoded together.  Then the same eight with
    each constrained one replaced by an unconstrained request that runs exactly as many
    steps (ignore_eos, max_tokens = its token count): the batches have the same rows at the
    same positions, so the free requests' tokens must be identical -- a mask applied to the
    wrong row, or a matcher advanced by another request's token, would change them."""
    st, _ = server
    tok = smollm2.tokenizer

    def chat(text: str, system: bool) -> list[int]:
        msgs = ([SYSTEM] if system else []) + [{"role": "user", "content": text}]
        return smollm2.tokenize(tok.apply_chat_template(msgs), add_special=True, parse_special=True)

    picks = [SCHEMAS[i] for i in (0, 6, 12, 18)]
    def mixed(constrained: bool, lengths: list[int]) -> list[Request]:
        reqs = []
        for k, (prompt, schema) in enumerate(picks):
            if constrained:
                reqs.append(Request(chat(prompt, True), max_tokens=200, sampling=SamplingParams(temp=0.0),
                                    constraint=st.grammars.constraint(GrammarSpec.json_schema(schema))))
            else:
                reqs.append(Request(chat(prompt, True), max_tokens=lengths[k], ignore_eos=True, sampling=SamplingParams(temp=0.0)))
            reqs.append(Request(chat(FREE[k], False), max_tokens=48, sampling=SamplingParams(temp=0.0, top_k=1)))
        return reqs

    a = _step_all(smollm2, mixed(True, []))
    lengths = [a[2 * k][-1].usage.completion_tokens for k in range(4)]
    for k, (_, schema) in enumerate(picks):
        assert a[2 * k][-1].finish_reason == "stop"
        _validate("".join(e.text for e in a[2 * k]), schema)
    b = _step_all(smollm2, mixed(False, lengths))
    assert [b[2 * k][-1].usage.completion_tokens for k in range(4)] == lengths
    for k in range(4):
        assert [e.token for e in a[2 * k + 1]] == [e.token for e in b[2 * k + 1]], FREE[k]


def test_json_object_and_pydantic_parse(server):
    st, base = server
    client = _client(base)
    r = client.chat.completions.create(model="m", messages=[SYSTEM, {"role": "user", "content": "Describe a car."}],
                                       temperature=0, max_tokens=120, response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)

    class Person(BaseModel):
        name: str = Field(max_length=30)
        age: int = Field(ge=0, le=120)
        hobbies: list[str] = Field(min_length=1, max_length=3)

    parse = client.beta.chat.completions.parse if hasattr(client, "beta") and hasattr(client.beta, "chat") else client.chat.completions.parse
    r = parse(model="m", messages=[SYSTEM, {"role": "user", "content": "Describe a person."}], response_format=Person,
              temperature=0, max_tokens=120)
    p = r.choices[0].message.parsed
    assert isinstance(p, Person) and 1 <= len(p.hobbies) <= 3


def test_streamed_schema(server):
    st, base = server
    schema = SCHEMAS[7][1]
    chunks = _client(base).chat.completions.create(
        model="m", messages=[SYSTEM, {"role": "user", "content": SCHEMAS[7][0]}], temperature=0, max_tokens=200, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "book", "schema": schema}})
    text, finish = "", None
    for ch in chunks:
        text += ch.choices[0].delta.content or ""
        finish = ch.choices[0].finish_reason or finish
    assert finish == "stop"
    _validate(text, schema)


# ---- GBNF: each output checked by a parser written here -------------------------------------
def _arith(s: str) -> bool:
    """expr := term (("+"|"-") term)*; term := factor (("*"|"/") factor)*; factor := 1-3 digits | "(" expr ")"."""
    i = 0

    def factor() -> bool:
        nonlocal i
        if i < len(s) and s[i] == "(":
            i += 1
            if not expr() or i >= len(s) or s[i] != ")":
                return False
            i += 1
            return True
        j = i
        while i < len(s) and s[i].isdigit() and i - j < 3:
            i += 1
        return i > j

    def chain(sub, ops) -> bool:
        nonlocal i
        if not sub():
            return False
        while i < len(s) and s[i] in ops:
            i += 1
            if not sub():
                return False
        return True

    def term() -> bool:
        return chain(factor, "*/")

    def expr() -> bool:
        return chain(term, "+-")

    return expr() and i == len(s)


def _date_line(s: str) -> bool:
    m = re.fullmatch(r"DATE (\d{4})-(\d{2})-(\d{2}) ([A-Za-z ]{1,30})\.", s)
    return bool(m) and m.group(1).startswith("20") and 1 <= int(m.group(2)) <= 12 and 1 <= int(m.group(3)) <= 31


def _item_list(s: str) -> bool:
    lines = s.split("\n")
    return lines[-1] == "" and 1 <= len(lines) - 1 <= 5 and all(re.fullmatch(r"- [a-z]+( [a-z]+)?", x) for x in lines[:-1])


@pytest.mark.parametrize("name,check", [("arith", _arith), ("date", _date_line), ("list", _item_list)])
def test_gbnf_grammars(server, name, check):
    st, base = server
    prompt, grammar = GRAMMARS[name]
    for temp, seed in ((0.0, 0), (0.8, 1), (0.8, 2)):
        r = httpx.post(base + "/completion", json={"prompt": prompt, "grammar": grammar, "n_predict": 80,
                                                   "temperature": temp, "seed": seed}, timeout=120)
        body = r.json()
        assert r.status_code == 200 and body["stop_type"] == "eos", body
        assert check(body["content"]), (name, body["content"])
    assert not check(body["content"] + "?")  # the checker is not a yes-machine


# ---- tool calls -------------------------------------------------------------------------------
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def _args_valid(call, tools: list[dict]) -> dict:
    fn = {t["function"]["name"]: t["function"] for t in tools}[call.function.name]
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, fn["parameters"])
    return args


@pytest.mark.parametrize("tools", [[WEATHER], [WEATHER, TIME]], ids=["one", "two"])
def test_tool_calls_required_and_named(server, tools):
    st, base = server
    client = _client(base)
    for choice in ("required", {"type": "function", "function": {"name": tools[-1]["function"]["name"]}}):
        r = client.chat.completions.create(model="m", messages=ASK, tools=tools, tool_choice=choice, temperature=0, max_tokens=120)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls" and c.message.content is None
        assert len(c.message.tool_calls) == 1 and c.message.tool_calls[0].type == "function"
        assert c.message.tool_calls[0].id
        _args_valid(c.message.tool_calls[0], tools)
        if isinstance(choice, dict):
            assert c.message.tool_calls[0].function.name == choice["function"]["name"]


def test_tool_calls_parallel_streamed_and_round_trip(server):
    st, base = server
    client = _client(base)
    tools = [WEATHER, TIME]
    r = client.chat.completions.create(model="m", messages=ASK, tools=tools, tool_choice="required", parallel_tool_calls=True,
                                       temperature=0, max_tokens=200)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) >= 1
    for call in calls:
        _args_valid(call, tools)
    stream = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0,
                                            max_tokens=120, stream=True)
    deltas, finish = [], None
    for ch in stream:
        deltas += ch.choices[0].delta.tool_calls or []
        finish = ch.choices[0].finish_reason or finish
    assert finish == "tool_calls" and deltas and deltas[0].function.name == "get_weather"
    args = json.loads("".join(d.function.arguments or "" for d in deltas))
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    # the tool's answer goes back; the next turn is text or another valid call
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": deltas[0].id, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": deltas[0].id, "content": "18 degrees and sunny"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER], temperature=0, max_tokens=60)
    c = r.choices[0]
    # SmolLM2's greedy next turn (tool_choice auto by default) is another call, for the same city
    assert c.finish_reason == "tool_calls" and c.message.content is None and len(c.message.tool_calls) == 1, c
    assert c.message.tool_calls[0].function.name == "get_weather"
    assert _args_valid(c.message.tool_calls[0], [WEATHER])["city"] == "Paris"


def test_tool_choice_auto_text_or_call(server):
    """tool_choice "auto" lets the model choose, and SmolLM2's greedy choice is pinned: text
    for both of these (the round trip above pins a call under auto).  The weather question's
    first token is a near tie ("Paris" / "The": 0.002 apart in logprob on an AMD EPYC at one
    thread, the other way at two), so only its kind is pinned there; the sea's opening is not
    close (0.28 against 3.6) and is pinned."""
    st, base = server
    client = _client(base)
    want = [(ASK, "", "Paris"),
            ([{"role": "user", "content": "Write one sentence about the sea."}], "The sea is a vast and mysterious", "sea")]
    for messages, start, word in want:
        r = client.chat.completions.create(model="m", messages=messages, tools=[WEATHER, TIME], tool_choice="auto",
                                           temperature=0, max_tokens=60)
        c = r.choices[0]
        assert c.message.tool_calls is None and c.finish_reason in ("stop", "length"), c
        assert c.message.content.startswith(start) and word in c.message.content, c.message.content
        assert "<tool_call>" not in c.message.content and not c.message.content.lstrip().startswith("{")
    r = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=20)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length")


# ---- bad input: a 400 that names the problem, and the server keeps serving ------------------
BAD = [
    ("/completion", {"prompt": "x", "grammar": "root ::= undefined_rule"}, "undefined_rule"),
    ("/completion", {"prompt": "x", "grammar": 'root ::= "a', }, "gbnf"),
    ("/completion", {"prompt": "x", "grammar": "root ::= [a-z]", "json_schema": {"type": "object"}}, "not both"),
    ("/completion", {"prompt": "x", "json_schema": {"type": "object", "not": {"type": "string"}}}, "not"),
    ("/v1/chat/completions", {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "("}}}}, "json_schema"),
    ("/v1/chat/completions", {"messages": ASK, "response_format": {"type": "xml"}}, "response_format"),
    ("/v1/chat/completions", {"messages": ASK, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "get_time"),
    ("/v1/chat/completions", {"messages": ASK, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]}, "parameters"),
    ("/v1/chat/completions", {"messages": ASK, "tools": [{"type": "function", "function": {"name": "f", "parameters": [1, 2]}}]}, "parameters"),
]


@pytest.mark.parametrize("path,body,needle", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_constraints_are_400(server, path, body, needle):
    st, base = server
    r = httpx.post(base + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
    ok = httpx.post(base + "/completion", json={"prompt": "Hi", "n_predict": 2}, timeout=60)
    assert ok.status_code == 200


def test_dead_end_ends_the_request_only(server):
    """A grammar that can end only with end-of-generation, under ignore_eos: the request ends
    with stop_type "grammar" and a message; a concurrent free request is untouched; no slot is
    left busy."""
    st, base = server
    with ThreadPoolExecutor(2) as ex:
        dead = ex.submit(httpx.post, base + "/completion", json={"prompt": "Say yes:", "grammar": 'root ::= "yes"', "ignore_eos": True,
                                                                  "n_predict": 20, "temperature": 0}, timeout=60)
        free = ex.submit(httpx.post, base + "/completion", json={"prompt": "Once upon a time", "n_predict": 16, "temperature": 0}, timeout=60)
        d, f = dead.result().json(), free.result().json()
    assert d["stop_type"] == "grammar" and d["content"] == "yes" and "ignore_eos" in d["grammar_error"]
    assert f["tokens_predicted"] == 16
    slots = httpx.get(base + "/slots", timeout=10).json()
    assert not any(s["is_processing"] for s in slots)
    r = _client(base).chat.completions.create(model="m", messages=ASK, temperature=0, max_tokens=10,
                                              extra_body={"grammar": 'root ::= "ok"', "ignore_eos": True})
    assert r.choices[0].finish_reason == "grammar" and r.choices[0].message.content == "ok"


def test_hermes_template_renders_tools_and_calls_parse(smollm2_path):
    """A template with its own tool syntax (<tool_call> blocks): the template renders the
    tools, the grammar holds the blocks, the calls come back as tool_calls; the call and
    its result render through the template on the next turn."""
    from structured_cases import HERMES_TEMPLATE

    from llamapy.chat_template import ChatTemplate
    from llamapy.model.model import Model
    from llamapy.chat import tools as tools_mod

    model = Model.load(smollm2_path)
    model.tokenizer._chat = ChatTemplate(HERMES_TEMPLATE)
    assert tools_mod.template_format(HERMES_TEMPLATE) == "hermes"
    with serving_state(model, n_ctx=2048, np_=2, n_batch=256) as st, uvicorn_server(st) as base:
        client = _client(base)
        for parallel in (False, True):
            r = client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
                                               parallel_tool_calls=parallel, temperature=0, max_tokens=120)
            c = r.choices[0]
            assert c.finish_reason == "tool_calls" and c.message.tool_calls, c.message
            for call in c.message.tool_calls:
                _args_valid(call, [WEATHER, TIME])
        call = c.message.tool_calls[0]
        msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                      {"role": "tool", "tool_call_id": call.id, "content": "18 degrees"}]
        text = model.tokenizer.apply_chat_template(
            tools_mod.render_messages([m for m in msgs], None, "hermes"), tools=[WEATHER])
        assert "<tools>" in text and "<tool_call>\n{\"name\": \"" + call.function.name in text and "<tool_response>\n18 degrees" in text
        r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER, TIME], temperature=0, max_tokens=60)
        c = r.choices[0]
        assert (c.message.tool_calls and c.finish_reason == "tool_calls") or (c.message.content and not c.message.tool_calls)
