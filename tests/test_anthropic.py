"""Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) on SmolLM2: the message,
its event stream (order, and text deltas that make the greedy message's text), stop_sequences,
max_tokens, system blocks, count_tokens against the prompt's tokens, a forced tool call,
tool_result turns, errors in Anthropic's shape, x-api-key, and the `anthropic` client."""
from __future__ import annotations

import json

import httpx
import pytest
from server_harness import asgi_call, serving_state, uvicorn_server

pytestmark = pytest.mark.slow
KEY = "sekrit"
AUTH = {"x-api-key": KEY}
ASK = [{"role": "user", "content": "Write two sentences about the sea."}]
SYSTEM_BLOCKS = [{"type": "text", "text": "You are a "}, {"type": "text", "text": "helpful assistant."}]
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def state(smollm2):
    with serving_state(smollm2, n_ctx=2048, np_=1, api_key=KEY) as st:
        yield st


def _post(state, path: str, body: dict) -> httpx.Response:
    return asgi_call(state, "POST", path, json=body, headers=AUTH)


def _events(text: str) -> list[tuple[str, dict]]:
    """(event line, data) per server-sent event; the two must name the same type."""
    out = []
    for chunk in text.strip().split("\n\n"):
        lines = chunk.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), chunk
        kind, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == kind, chunk
        out.append((kind, data))
    return out


def test_message_and_its_stream(state) -> None:
    body = {"model": "m", "max_tokens": 24, "temperature": 0, "system": SYSTEM_BLOCKS, "messages": ASK}
    r = _post(state, "/v1/messages", body)
    assert r.status_code == 200, r.text
    m = r.json()
    assert m["id"].startswith("msg_") and m["type"] == "message" and m["role"] == "assistant" and m["model"] == "m"
    assert [b["type"] for b in m["content"]] == ["text"] and m["content"][0]["text"]
    assert m["stop_reason"] in ("end_turn", "max_tokens") and m["stop_sequence"] is None and "timings" not in m
    u = m["usage"]
    assert u["output_tokens"] > 0 and u["input_tokens"] + u["cache_read_input_tokens"] > 0

    r = _post(state, "/v1/messages", {**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    evs = _events(r.text)
    kinds = [k for k, _ in evs]
    n = len(kinds) - 5
    assert kinds == ["message_start", "content_block_start"] + ["content_block_delta"] * n + \
        ["content_block_stop", "message_delta", "message_stop"], kinds
    start = evs[0][1]["message"]
    assert start["content"] == [] and start["role"] == "assistant" and start["usage"]["input_tokens"] > 0
    assert evs[1][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    deltas = [d for k, d in evs if k == "content_block_delta"]
    assert all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for d in deltas)
    assert "".join(d["delta"]["text"] for d in deltas) == m["content"][0]["text"]
    assert evs[-3][1]["index"] == 0
    md = evs[-2][1]
    assert md["delta"] == {"stop_reason": m["stop_reason"], "stop_sequence": None}
    assert md["usage"]["output_tokens"] == u["output_tokens"]


def test_count_tokens_is_the_prompts(state) -> None:
    """count_tokens: the tokens of the prompt the template renders (what /apply-template gives
    for the same conversation in OpenAI's shape), system as a string or as blocks alike, and
    what a message reports as its input."""
    body = {"model": "m", "system": SYSTEM_BLOCKS, "messages": ASK}
    r = _post(state, "/v1/messages/count_tokens", body)
    assert r.status_code == 200, r.text
    n = r.json()["input_tokens"]
    assert r.json() == {"input_tokens": n}
    as_string = _post(state, "/v1/messages/count_tokens", {**body, "system": "You are a helpful assistant."}).json()
    assert as_string == {"input_tokens": n}
    prompt = _post(state, "/apply-template", {"messages": [{"role": "system", "content": "You are a helpful assistant."}, *ASK]}).json()["prompt"]
    toks = _post(state, "/tokenize", {"content": prompt, "add_special": True}).json()["tokens"]
    assert n == len(toks) > 10
    u = _post(state, "/v1/messages", {**body, "max_tokens": 2}).json()["usage"]
    assert u["input_tokens"] + u["cache_read_input_tokens"] == n


def test_stop_sequence_and_max_tokens(state) -> None:
    body = {"max_tokens": 40, "temperature": 0, "messages": ASK}
    text = _post(state, "/v1/messages", body).json()["content"][0]["text"]
    words = text.split()
    assert len(words) > 4, text
    stop = " " + words[3]
    r = _post(state, "/v1/messages", {**body, "stop_sequences": ["@@never@@", stop]}).json()
    assert r["stop_reason"] == "stop_sequence" and r["stop_sequence"] == stop, r
    assert r["content"][0]["text"] == text[:text.index(stop)]
    r = _post(state, "/v1/messages", {**body, "max_tokens": 3}).json()
    assert r["stop_reason"] == "max_tokens" and r["usage"]["output_tokens"] == 3 and r["stop_sequence"] is None


def test_forced_tool_call(state) -> None:
    body = {"max_tokens": 60, "temperature": 0, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"},
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
    m = _post(state, "/v1/messages", body).json()
    assert m["stop_reason"] == "tool_use", m
    use = [b for b in m["content"] if b["type"] == "tool_use"]
    assert len(use) == 1 and use[0]["name"] == "get_weather" and use[0]["id"]
    assert set(use[0]["input"]) == {"city"} and isinstance(use[0]["input"]["city"], str) and len(use[0]["input"]["city"]) <= 20

    evs = _events(_post(state, "/v1/messages", {**body, "stream": True}).text)
    starts = [d for k, d in evs if k == "content_block_start"]
    stops = [d["index"] for k, d in evs if k == "content_block_stop"]
    assert [s["index"] for s in starts] == stops == list(range(len(starts)))
    tool = [s for s in starts if s["content_block"]["type"] == "tool_use"]
    assert len(tool) == 1 and tool[0]["content_block"]["name"] == "get_weather"
    parts = [d["delta"]["partial_json"] for k, d in evs if k == "content_block_delta" and d["delta"]["type"] == "input_json_delta"]
    assert json.loads("".join(parts)) == use[0]["input"]
    assert evs[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_tool_result_turns(state) -> None:
    """tool_use / tool_result / thinking blocks become the template's tool calls, tool messages
    and reasoning: they reach the prompt (its token count grows with them)."""
    def turns(result: str) -> list[dict]:
        return [{"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": result}]},
                                             {"type": "text", "text": "Thanks."}]}]
    short = _post(state, "/v1/messages/count_tokens", {"tools": [WEATHER], "messages": turns("Sunny")}).json()["input_tokens"]
    long = _post(state, "/v1/messages/count_tokens", {"tools": [WEATHER], "messages": turns("Sunny, 25 degrees, light wind")}).json()["input_tokens"]
    assert long > short > 0
    r = _post(state, "/v1/messages", {"max_tokens": 8, "tools": [WEATHER], "messages": turns("Sunny")})
    assert r.status_code == 200 and r.json()["content"], r.text


def test_errors_and_api_key(state) -> None:
    r = _post(state, "/v1/messages", {"max_tokens": 5})
    assert r.status_code == 400 and r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    assert "messages" in r.json()["error"]["message"]
    r = _post(state, "/v1/messages", {"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})
    assert r.status_code == 400 and "messages[0].role" in r.json()["error"]["message"], r.text
    r = _post(state, "/v1/messages", {"max_tokens": 5, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}, "messages": ASK})
    assert r.status_code == 400 and "nope" in r.json()["error"]["message"], r.text
    r = _post(state, "/v1/messages", {"max_tokens": 2, "messages": [], "metadata": {"user_id": "u"}, "thinking": {"type": "enabled", "budget_tokens": 9}})
    assert r.status_code == 200 and r.json()["type"] == "message", r.text  # llama-server accepts no messages
    body = {"max_tokens": 2, "messages": ASK}
    r = asgi_call(state, "POST", "/v1/messages", json=body)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", r.text
    r = asgi_call(state, "POST", "/v1/messages", json=body, headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and r.json()["type"] == "error"
    assert asgi_call(state, "POST", "/v1/messages", json=body, headers={"authorization": f"Bearer {KEY}"}).status_code == 200
    assert asgi_call(state, "POST", "/v1/chat/completions", json=body, headers=AUTH).status_code == 200


def test_anthropic_client(state) -> None:
    anthropic = pytest.importorskip("anthropic", reason="the `anthropic` package (pip install -e .[dev]) is not installed")
    body = {"model": "smollm2", "max_tokens": 20, "system": "Be brief.", "messages": ASK}
    want = _post(state, "/v1/messages", {**body, "temperature": 0}).json()
    body["extra_body"] = {"temperature": 0}  # (this SDK's create() has no temperature argument)
    with uvicorn_server(state) as base:
        client = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0)
        got = client.messages.create(**body)
        assert got.content[0].text == want["content"][0]["text"] and got.stop_reason == want["stop_reason"]
        with client.messages.stream(**body) as s:
            pieces = list(s.text_stream)
            final = s.get_final_message()
        assert "".join(pieces) == final.content[0].text == want["content"][0]["text"]
        assert final.usage.output_tokens == want["usage"]["output_tokens"]
        assert client.messages.count_tokens(model="smollm2", messages=ASK, system="Be brief.").input_tokens > 0
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0).messages.create(**body)
