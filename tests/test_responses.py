"""OpenAI Responses API (/v1/responses, /responses, /v1/responses/input_tokens) on SmolLM2:
the response object, its event stream (order, numbering, text deltas that make the greedy
response's text), instructions and input items, input_tokens against the chat route's prompt,
a forced function call and its function_call_output turn, errors, and the `openai` client's
responses.create and responses.stream."""
from __future__ import annotations

import json

import httpx
import pytest
from server_harness import asgi_call, serving_state, uvicorn_server

pytestmark = pytest.mark.slow
ASK = "Write two sentences about the sea."
ITEMS = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": ASK}]
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def state(smollm2):
    with serving_state(smollm2, n_ctx=2048, np_=1) as st:
        yield st


def _post(state, path: str, body: dict) -> httpx.Response:
    return asgi_call(state, "POST", path, json=body)


def _events(text: str) -> list[dict]:
    """The data of each server-sent event; its `event:` line names its type."""
    out = []
    for chunk in text.strip().split("\n\n"):
        lines = chunk.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ") and len(lines) == 2, chunk
        data = json.loads(lines[1][6:])
        assert data["type"] == lines[0][7:], chunk
        out.append(data)
    return out


def _text(resp: dict) -> str:
    return "".join(p["text"] for it in resp["output"] if it["type"] == "message" for p in it["content"] if p["type"] == "output_text")


def test_response_and_its_stream(state) -> None:
    body = {"model": "m", "input": ITEMS, "max_output_tokens": 24, "temperature": 0}
    r = _post(state, "/v1/responses", body)
    assert r.status_code == 200, r.text
    resp = r.json()
    assert resp["id"].startswith("resp_") and resp["object"] == "response" and resp["status"] == "completed" and resp["model"] == "m"
    assert [it["type"] for it in resp["output"]] == ["message"] and resp["output"][0]["id"].startswith("msg_")
    assert resp["output"][0]["role"] == "assistant" and _text(resp)
    u = resp["usage"]
    assert u["output_tokens"] == 24 and u["total_tokens"] == u["input_tokens"] + 24

    r = _post(state, "/responses", {**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    evs = _events(r.text)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    kinds = [e["type"] for e in evs]
    n = len(kinds) - 8
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"] + \
        ["response.output_text.delta"] * n + ["response.output_text.done", "response.content_part.done",
                                              "response.output_item.done", "response.completed"], kinds
    rid, mid = evs[0]["response"]["id"], evs[2]["item"]["id"]
    assert rid.startswith("resp_") and evs[0]["response"]["status"] == "in_progress" and evs[1]["response"]["id"] == rid
    assert mid.startswith("msg_") and all(e["item_id"] == mid and e["output_index"] == 0 for e in evs[3:-2])
    text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
    assert text == evs[-4]["text"] == evs[-2]["item"]["content"][0]["text"] == _text(resp)
    done = evs[-1]["response"]
    assert done["id"] == rid and done["status"] == "completed" and _text(done) == text and done["usage"]["output_tokens"] == 24


def test_instructions_and_input_tokens(state) -> None:
    """instructions + a string input is the same prompt as a system and a user item; its
    input_tokens are the chat route's prompt_tokens for that conversation, and a response's."""
    a = _post(state, "/v1/responses/input_tokens", {"instructions": "You are a helpful assistant.", "input": ASK}).json()
    b = _post(state, "/responses/input_tokens", {"input": ITEMS}).json()
    assert a == b == {"object": "response.input_tokens", "input_tokens": a["input_tokens"]}
    chat = _post(state, "/v1/chat/completions", {"messages": ITEMS, "max_tokens": 1}).json()
    assert a["input_tokens"] == chat["usage"]["prompt_tokens"] > 10
    assert _post(state, "/v1/responses", {"input": ITEMS, "max_output_tokens": 1}).json()["usage"]["input_tokens"] == a["input_tokens"]
    typed = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Write two sentences"},
                                                              {"type": "input_text", "text": " about the sea."}]}]
    assert _post(state, "/v1/responses/input_tokens", {"input": typed, "instructions": "You are a helpful assistant."}).json() == a


def test_forced_function_call_and_its_output(state) -> None:
    body = {"input": "What is the weather in Paris?", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"},
            "max_output_tokens": 60, "temperature": 0}
    resp = _post(state, "/v1/responses", body).json()
    calls = [it for it in resp["output"] if it["type"] == "function_call"]
    assert len(calls) == 1 and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("fc_") and calls[0]["call_id"], resp
    args = json.loads(calls[0]["arguments"])
    assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 20

    evs = _events(_post(state, "/v1/responses", {**body, "stream": True}).text)
    added = [e for e in evs if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"]
    assert len(added) == 1 and added[0]["item"]["name"] == "get_weather"
    deltas = "".join(e["delta"] for e in evs if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(deltas) == args and evs[-1]["response"]["output"][-1]["arguments"] == deltas

    def turn(result: str) -> list[dict]:
        return [{"role": "user", "content": "What is the weather in Paris?"},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
                {"type": "function_call_output", "call_id": "c1", "output": result}]
    short = _post(state, "/v1/responses/input_tokens", {"tools": [WEATHER], "input": turn("Sunny")}).json()["input_tokens"]
    long = _post(state, "/v1/responses/input_tokens", {"tools": [WEATHER], "input": turn("Sunny, 25 degrees, light wind")}).json()["input_tokens"]
    assert long > short > 0
    r = _post(state, "/v1/responses", {"tools": [WEATHER], "input": turn("Sunny"), "max_output_tokens": 8})
    assert r.status_code == 200 and r.json()["output"], r.text


@pytest.mark.parametrize("body, status, where", [
    ({"model": "m"}, 400, "input"),
    ({"input": "x", "previous_response_id": "resp_1"}, 400, "previous_response_id"),
    ({"input": [{"type": "nonsense"}]}, 400, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}]}, 500,
     "image input is not supported"),
    ({"input": "x", "max_output_tokens": "5"}, 400, "max_tokens"),
])
def test_errors(state, body, status, where) -> None:
    r = _post(state, "/v1/responses", body)
    assert r.status_code == status and where in r.json()["error"]["message"], r.text


def test_openai_client(state) -> None:
    openai = pytest.importorskip("openai", reason="the `openai` package (pip install -e .[dev]) is not installed")
    want = _post(state, "/v1/responses", {"input": ITEMS, "max_output_tokens": 16, "temperature": 0}).json()
    with uvicorn_server(state) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        got = client.responses.create(model="m", input=ITEMS, max_output_tokens=16, temperature=0)
        assert got.id.startswith("resp_") and got.output[0].id.startswith("msg_") and got.output_text == _text(want)
        with client.responses.stream(model="m", input=ITEMS, max_output_tokens=16, temperature=0) as s:
            pieces = [e.delta for e in s if e.type == "response.output_text.delta"]
            final = s.get_final_response()
        assert "".join(pieces) == final.output_text == _text(want)
        assert final.usage.output_tokens == want["usage"]["output_tokens"]
        tool = {k: v for k, v in WEATHER.items()} | {"strict": False}
        with client.responses.stream(model="m", input="What is the weather in Paris?", tools=[tool], tool_choice="required",
                                     max_output_tokens=60, temperature=0) as s:
            final = s.get_final_response()
        calls = [it for it in final.output if it.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather" and "city" in json.loads(calls[0].arguments)


def test_stream_with_llama_servers_telemetry(smollm2) -> None:
    """llama-server's return_progress and timings_per_token on /responses' stream: a
    response.in_progress event with prompt_progress before the first prompt batch and after each (n_batch 32: the
    prompt takes several), timings on each output_text.delta, and timings on response.completed
    (always, as llama-server's final event); without them, neither (the suite's
    test_responses_stream_with_llama_telemetry)."""
    body = {"input": "This is a test" * 10, "max_output_tokens": 8, "temperature": 0.8, "seed": 1, "ignore_eos": True, "stream": True}
    with serving_state(smollm2, n_ctx=512, np_=1, n_batch=32) as st:
        evs = _events(_post(st, "/responses", body | {"timings_per_token": True, "return_progress": True}).text)
        n_in = _post(st, "/responses/input_tokens", {"input": body["input"]}).json()["input_tokens"]
        plain = _events(_post(st, "/responses", body).text)
        bad = _post(st, "/responses", body | {"return_progress": "yes"})
    prog = [e["prompt_progress"] for e in evs if "prompt_progress" in e]
    assert all(e["type"] == "response.in_progress" for e in evs if "prompt_progress" in e)
    assert len(prog) == 1 + -(-n_in // 32) >= 3  # llama-server's 0% update, then one per prompt batch
    assert prog[0]["processed"] == prog[0]["cache"]
    assert all(p["total"] == n_in and p["processed"] >= p["cache"] and p["time_ms"] >= 0 for p in prog)
    assert [p["processed"] for p in prog] == sorted(p["processed"] for p in prog) and prog[-1]["processed"] == n_in
    deltas = [e for e in evs if e["type"] == "response.output_text.delta"]
    assert deltas and all("prompt_per_second" in e["timings"] and "predicted_per_second" in e["timings"] for e in deltas)
    assert evs[-1]["type"] == "response.completed" and evs[-1]["timings"]["predicted_n"] == 8
    assert "usage" in evs[-1]["response"]
    assert not any("prompt_progress" in e for e in plain) and not any("timings" in e for e in plain[:-1])
    assert "timings" in plain[-1]
    assert bad.status_code == 400 and "return_progress: Input should be a valid boolean" in bad.text
