"""What llama.cpp's server tests (tools/server/tests/unit/test_chat_completion.py) ask of a chat
server, on SmolLM2 served by uvicorn on 127.0.0.1: a bad field is a 400 (not FastAPI's 422);
`verbose` / -v put `__verbose` (with the rendered prompt) in the reply; vLLM's
continue_final_message, refused with add_generation_prompt; a continued assistant message's
text parts joined by a blank line (common_chat_msg::render_content); the stream's role chunk has
`content: null`; stream_options.include_usage adds a chunk with no choices, the usage and the
timings; /chat/completions/input_tokens counts the prompt."""
from __future__ import annotations

import json
import time

import httpx
import pytest
from server_harness import serving_state, uvicorn_server

BOOK = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]


@pytest.fixture(scope="module")
def served(smollm2):
    with serving_state(smollm2, n_ctx=1024, np_=2) as state, uvicorn_server(state, http="h11") as base:
        yield state, base


def _post(base: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(base + path, json=body, timeout=60)


def test_bad_fields_are_400(served):
    _, base = served
    for messages in (None, "string", [123], [{}], [{"role": 123}], [{"role": "system", "content": 123}],
                     BOOK[1:] + [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]):
        r = _post(base, "/chat/completions", {"messages": messages, "max_tokens": 1})
        assert r.status_code == 400 and "error" in r.json(), (messages, r.status_code, r.text)


def test_verbose_field(served):
    state, base = served
    body = {"messages": BOOK, "max_tokens": 2, "temperature": 0}
    r = _post(base, "/chat/completions", body | {"verbose": True}).json()
    v = r["__verbose"]
    assert "Book" in v["prompt"] and v["prompt"].endswith("<|im_start|>assistant\n")
    assert v["content"] == r["choices"][0]["message"]["content"] and v["tokens_predicted"] == 2 == len(v["tokens"])
    assert "__verbose" not in _post(base, "/chat/completions", body).json()  # the server's default: off
    c = _post(base, "/v1/completions", {"prompt": "Once", "max_tokens": 2, "verbose": True}).json()
    assert c["__verbose"]["prompt"] == "Once" and c["__verbose"]["content"] == c["choices"][0]["text"]
    state.verbose = True  # -v: on unless the request says otherwise
    try:
        assert "__verbose" in _post(base, "/chat/completions", body).json()
        assert "__verbose" not in _post(base, "/chat/completions", body | {"verbose": False}).json()
    finally:
        state.verbose = False


def test_continue_final_message(served):
    _, base = served
    parts = [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]
    msgs = BOOK + [{"role": "assistant", "content": parts}]
    r = _post(base, "/chat/completions", {"messages": msgs, "max_tokens": 1, "verbose": True,
                                          "add_generation_prompt": False, "continue_final_message": True})
    assert r.status_code == 200 and r.json()["__verbose"]["prompt"].endswith("<|im_start|>assistant\nWh\n\nill")
    r = _post(base, "/chat/completions", {"messages": msgs, "max_tokens": 1, "continue_final_message": True})
    assert r.status_code == 400 and "add_generation_prompt and continue_final_message" in r.json()["error"]["message"]


def test_stream_role_chunk_and_usage_chunk(served):
    _, base = served
    body = {"messages": BOOK, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", base + "/chat/completions", json=body, timeout=60) as r:
        chunks = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 3 and last["timings"]["predicted_n"] == 3
    assert all(c["choices"] for c in chunks[:-1])


def test_chat_input_tokens(served):
    state, base = served
    prompt = _post(base, "/apply-template", {"messages": BOOK}).json()["prompt"]
    n = len(state.model.tokenize(prompt, add_special=True, parse_special=True))
    for path in ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"):
        assert _post(base, path, {"messages": BOOK}).json() == {"input_tokens": n}


@pytest.mark.parametrize("value,end", [("off", "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
                                       ("auto", "<|im_start|>assistant\n"), ("on", "<|im_start|>assistant\n")])
def test_reasoning_flag(smollm2_path, value, end):
    """llama.cpp's `--reasoning off|on|auto` (test_template.py::test_reasoning): off renders Qwen3's
    template with enable_thinking false (its empty think block), a --chat-template-kwargs value wins."""
    from llamacpp_vocabs import templates_dir

    from llamapy.chat.apply import apply_template
    from llamapy.cli import build_parser
    from llamapy.cli.chat_flags import chat_options
    from llamapy.model.model import Model

    model = Model.load(smollm2_path)
    model.tokenizer._chat = None
    model.tokenizer.use_chat_template((templates_dir() / "Qwen-Qwen3-0.6B.jinja").read_text())
    opts = chat_options(build_parser().parse_args(["serve", "--reasoning", value]))
    prompt = apply_template(model.tokenizer.chat, [{"role": "user", "content": "What is today?"}], opts=opts)
    assert prompt.endswith(end) and (value == "off") == prompt.endswith("</think>\n\n"), prompt
    kw = chat_options(build_parser().parse_args(["serve", "-rea", "off", "--chat-template-kwargs", '{"enable_thinking": true}']))
    assert kw.template_kwargs["enable_thinking"] is True
    with pytest.raises(ValueError, match="--reasoning 'maybe': expected on, off or auto"):
        chat_options(build_parser().parse_args(["serve", "--reasoning", "maybe"]))


def test_completion_prompt_shapes(served):
    """/completion takes llama-server's prompt shapes (server/prompt_input.py): ids, a list of
    prompts (a list of results, in order, each with its index), strings mixed with ids (BOS only
    for a leading string), {"prompt_string": ...}; multimodal data is refused."""
    state, base = served
    text = "I believe the meaning of life is"
    ids = state.model.tokenize(text, add_special=True, parse_special=True)
    greedy = {"n_predict": 4, "temperature": 0}
    one = _post(base, "/completion", {"prompt": ids} | greedy).json()["content"]
    for prompt in ([ids, text], [ids, {"prompt_string": text}], [text, ids]):
        r = _post(base, "/completion", {"prompt": prompt} | greedy)
        assert r.status_code == 200 and [x["content"] for x in r.json()] == [one, one], r.text
        assert [x["index"] for x in r.json()] == [0, 1]
    assert _post(base, "/completion", {"prompt": {"prompt_string": text}} | greedy).json()["content"] == one
    mixed = [1, 2, "a b", 3, "c"]
    r = _post(base, "/completion", {"prompt": mixed} | greedy | {"n_predict": 1}).json()
    want = [1, 2, *state.model.tokenize("a b", add_special=False, parse_special=True), 3,
            *state.model.tokenize("c", add_special=False, parse_special=True)]
    assert r["tokens_evaluated"] == len(want)
    from llamapy.server.prompt_input import prompt_inputs

    assert prompt_inputs(state, mixed) == [want]
    assert prompt_inputs(state, [{"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]}],
                         "input", content_parts=True) == prompt_inputs(state, "hello world")
    r = _post(base, "/completion", {"prompt": {"prompt_string": "x", "multimodal_data": ["AAAA"]}})
    assert r.status_code == 500 and "multimodal" in r.json()["error"]["message"]
    for bad in ([], "", [[]], {"x": 1}, [ids, 1.5]):
        assert _post(base, "/completion", {"prompt": bad}).status_code == 400, bad
    assert _post(base, "/completion", {"prompt": [ids, ids], "stream": True}).status_code == 400


def test_multiple_choices(served):
    """llama-server's n (n_cmpl): n choices, index 0..n-1, each its own sequence, even with
    every one pinned to slot 0 (they queue); n over the slots (-np) is a 400 naming both."""
    _, base = served
    for _ in range(2):
        r = _post(base, "/chat/completions", {"messages": BOOK, "max_tokens": 8, "n": 2, "id_slot": 0})
        assert r.status_code == 200, r.text
        choices = r.json()["choices"]
        assert [c["index"] for c in choices] == [0, 1]
        for c in choices:
            assert c["message"]["role"] == "assistant" and c["finish_reason"] == "length"
    r = _post(base, "/chat/completions", {"messages": BOOK, "max_tokens": 1, "n": 3})
    assert r.status_code == 400 and "n (3)" in r.text and "2 slots" in r.text, r.text
    # each choice its own grammar state: greedy choices under one schema are the same valid JSON
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
    r = _post(base, "/chat/completions", {"messages": BOOK, "max_tokens": 24, "n": 2, "temperature": 0,
                                          "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 200, r.text
    texts = [c["message"]["content"] for c in r.json()["choices"]]
    assert texts[0] == texts[1] and isinstance(json.loads(texts[0])["a"], int), texts


def test_non_streamed_request_cancelled_when_client_leaves(served):
    """test_completion.py::test_cancel_request: a non-streamed /completion whose client gives up
    after 0.1 s is cancelled (llama-server notices the closed socket), not generated to its end;
    /slots shows the slot idle again within a poll or two."""
    state, base = served
    m = state.scheduler.metrics
    cancelled = m.n_requests_cancelled
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(base + "/completion", json={"prompt": "I believe the meaning of life is", "n_predict": -1,
                                               "ignore_eos": True}, timeout=0.1)
    deadline = time.monotonic() + 60
    while any(s["is_processing"] for s in httpx.get(base + "/slots", timeout=10).json()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert m.n_requests_cancelled == cancelled + 1  # cancelled, not run to the slot's end (512 cells)


def test_n_choices_cancelled_when_client_leaves(served):
    """n = 2 on /v1/chat/completions is two requests through the slots; a client that gives up
    after 0.1 s cancels both (each slot idle again, each counted cancelled), not one of them
    left generating to its slot's end."""
    state, base = served
    m = state.scheduler.metrics
    cancelled = m.n_requests_cancelled
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(base + "/v1/chat/completions", json={"messages": BOOK, "n": 2, "max_tokens": 2000,
                                                        "ignore_eos": True}, timeout=0.1)
    deadline = time.monotonic() + 60  # (the two may not have reached the slots when the client left)
    while time.monotonic() < deadline and (m.n_requests_cancelled < cancelled + 2 or any(
            s["is_processing"] for s in httpx.get(base + "/slots", timeout=10).json())):
        time.sleep(0.05)
    assert m.n_requests_cancelled == cancelled + 2, m


def _progress_chunks(base: str, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", base + path, json=body | {"stream": True, "return_progress": True, "timings_per_token": True}, timeout=60) as r:
        chunks = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    return chunks


def test_return_progress_chat_and_v1_completions(smollm2):
    """test_chat_completion.py::test_return_progress: /chat/completions streams llama-server's
    prompt_progress, each on a role delta {"role": "assistant", "content": null}: 0% before the
    first prompt batch, then after each batch of -b 64; the same prompt again has all but its last
    token cached (cache == n - 1) and two progress chunks.  /v1/completions: on an empty text."""
    with serving_state(smollm2, n_ctx=256, np_=1, n_batch=64) as state, uvicorn_server(state, http="h11") as base:
        body = {"max_tokens": 3, "messages": [{"role": "user", "content": "This is a test" * 10}]}
        n = len(state.model.tokenize(_post(base, "/apply-template", body).json()["prompt"], add_special=True, parse_special=True))
        assert 64 < n <= 128
        for cached in (0, n - 1):  # the second time: the slot holds the prompt (and the reply)
            chunks = _progress_chunks(base, "/chat/completions", body)
            prog = [c for c in chunks if "prompt_progress" in c]
            want = [cached] + list(range(cached + 64, n, 64)) + [n]
            assert [p["prompt_progress"]["processed"] for p in prog] == (want if cached == 0 else [n - 1, n]), prog
            assert all(p["prompt_progress"]["total"] == n and p["prompt_progress"]["cache"] == cached for p in prog)
            assert all(p["choices"][0]["delta"] == {"role": "assistant", "content": None} for p in prog)
            assert all(isinstance(p["prompt_progress"]["time_ms"], int) for p in prog)
            assert chunks[0] is prog[0]  # no role chunk before the 0% one
            assert all("timings" in c for c in chunks)  # timings_per_token: every chunk
        chunks = _progress_chunks(base, "/v1/completions", {"prompt": "This is a test", "max_tokens": 2})
        prog = [c for c in chunks if "prompt_progress" in c]
        assert len(prog) == 2 and all(p["choices"][0]["text"] == "" for p in prog)


def test_cache_prompt_false_decodes_the_whole_prompt(served):
    """llama-server's cache_prompt: false reuses no cached prefix (n_past = 0), so
    test_completion.py::test_consistent_result_same_seed's four identical greedy requests all take
    the same path (a whole-prompt batch, not a one-token decode over a kept prefix) and agree."""
    state, base = served
    body = {"prompt": "I believe the meaning of life is", "seed": 42, "temperature": 0.0, "n_predict": 16, "id_slot": 0}
    n = len(state.model.tokenize(body["prompt"], add_special=True, parse_special=True))
    outs = [_post(base, "/completion", body | {"cache_prompt": False}).json() for _ in range(3)]
    assert [(o["timings"]["cache_n"], o["timings"]["prompt_n"]) for o in outs] == [(0, n)] * 3
    assert len({o["content"] for o in outs}) == 1
    cached = _post(base, "/completion", body).json()  # the default, true: all but the last prompt token kept
    assert (cached["timings"]["cache_n"], cached["timings"]["prompt_n"]) == (n - 1, 1)
    chat = {"messages": BOOK, "max_tokens": 1, "id_slot": 0}
    _post(base, "/chat/completions", chat)
    assert _post(base, "/chat/completions", chat | {"cache_prompt": False}).json()["timings"]["cache_n"] == 0


def test_n_choices_stream_and_completions(served):
    """n > 1 as llama-server's n_cmpl, read with the official openai client: a streamed chat
    reply interleaves both choices' chunks (each its index, its role chunk and finish_reason),
    include_usage sums the completions over the prompt counted once; /v1/completions takes n
    streamed and not; choice j samples with seed + j (server_task::add_child), so choice 1 of
    seed s is what one choice of seed s + 1 writes."""
    openai = pytest.importorskip("openai", reason="the official openai client checks the wire format")
    _, base = served
    client = openai.OpenAI(base_url=base + "/v1", api_key="none")
    chunks = list(client.chat.completions.create(model="x", messages=BOOK, max_tokens=6, n=2, stream=True,
                                                 stream_options={"include_usage": True}))
    by_index: dict[int, list] = {0: [], 1: []}
    for c in chunks[:-1]:
        assert len(c.choices) == 1, c
        by_index[c.choices[0].index].append(c.choices[0])
    for i, cs in by_index.items():
        assert cs[0].delta.role == "assistant" and cs[-1].finish_reason == "length", (i, cs)
        assert sum(1 for c in cs if c.finish_reason) == 1
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 12, last
    assert last.usage.total_tokens == last.usage.prompt_tokens + 12
    # 2 tokens: sampled text that far does not depend on how the sequences were batched
    # (further on, a near tie can go either way between batch shapes)
    kw = {"model": "x", "prompt": "Once upon a time", "max_tokens": 2, "temperature": 1.5}
    for seed in range(42, 52, 2):  # a seed whose next one writes other text (else the check is empty)
        singles = [client.completions.create(seed=s, **kw).choices[0].text for s in (seed, seed + 1)]
        if singles[0] != singles[1]:
            break
    assert singles[0] != singles[1], singles
    r = client.completions.create(n=2, seed=seed, **kw)
    assert [c.index for c in r.choices] == [0, 1] and r.usage.completion_tokens == 4, r
    assert [c.text for c in r.choices] == singles, ([c.text for c in r.choices], singles)
    streamed: dict[int, str] = {0: "", 1: ""}
    for c in client.completions.create(n=2, seed=seed, stream=True, **kw):
        for ch in c.choices:
            streamed[ch.index] += ch.text
    assert streamed == {0: singles[0], 1: singles[1]}, (streamed, singles)
    assert _post(base, "/v1/completions", {"prompt": "x", "n": 3}).status_code == 400
