"""HTTP layer on the tiny model, in-process through httpx's ASGI transport: routes, SSE,
errors in OpenAI's shape, API key, metrics; /health while loading."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from server_harness import serving_state, asgi_call as _call

from llamapy.server.bridge import ServerState
from llamapy.server.http import create_app


@pytest.fixture(scope="module")
def state(tiny):
    with serving_state(tiny, n_ctx=1024, np_=4, n_batch=64) as st:
        yield st


def test_health_503_while_loading():
    st = ServerState()
    r = _call(st, "GET", "/health")
    assert r.status_code == 503 and r.json()["error"]["message"] == "Loading model"
    assert _call(st, "POST", "/v1/completions", json={"prompt": "hi"}).status_code == 503


def test_completion_and_usage(state):
    r = _call(state, "POST", "/v1/completions", json={"prompt": "hello there", "max_tokens": 5, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    n_prompt = len(state.model.tokenize("hello there", add_special=True, parse_special=True))
    assert body["usage"]["prompt_tokens"] == n_prompt
    assert body["usage"]["completion_tokens"] <= 5
    assert body["choices"][0]["finish_reason"] in ("length", "stop")
    assert body["system_fingerprint"] == _call(state, "GET", "/props").json()["build_info"]  # as llama-server
    r2 = _call(state, "POST", "/completion", json={"prompt": "hello there", "n_predict": 5, "temperature": 0})
    assert r2.json()["content"] == body["choices"][0]["text"]  # same greedy text, native route


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_json_body_whatever_its_content_type(state, content_type):
    """`curl -d '{..}' URL` (a form content type) works as with llama-server, which parses every
    POST body as JSON; a body that is not JSON is still the 400 for malformed JSON."""
    headers = {"content-type": content_type} if content_type else {}
    body = json.dumps({"prompt": "hello there", "n_predict": 3, "temperature": 0}).encode()
    r = _call(state, "POST", "/completion", content=body, headers=headers)
    assert r.status_code == 200, r.text
    want = _call(state, "POST", "/completion", json={"prompt": "hello there", "n_predict": 3, "temperature": 0})
    assert r.json()["content"] == want.json()["content"]
    chat = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    assert _call(state, "POST", "/v1/chat/completions", content=chat, headers=headers).status_code == 200
    r = _call(state, "POST", "/completion", content=b"prompt=hi", headers=headers)
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]


def test_native_n_probs_and_timings_are_llama_servers(state):
    """/completion with n_probs: llama-server's completion_probabilities (probabilities before
    the sampler chain) -- each token's id, text, UTF-8 bytes, natural-log probability and its
    n_probs top candidates likewise, largest first; greedy picks the first.  The timings carry
    llama-server's per-token milliseconds."""
    r = _call(state, "POST", "/completion", json={"prompt": "hello there", "n_predict": 4, "temperature": 0, "n_probs": 3})
    body = r.json()
    probs = body["completion_probabilities"]
    assert len(probs) == body["tokens_predicted"] > 0
    for e in probs:
        assert set(e) == {"id", "token", "bytes", "logprob", "top_logprobs"}
        top = e["top_logprobs"]
        assert len(top) == 3 and top[0]["id"] == e["id"] and top[0]["logprob"] == e["logprob"] <= 0
        assert [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert all(set(t) == {"id", "token", "bytes", "logprob"} for t in top)
        assert bytes(e["bytes"]).decode("utf-8", errors="replace") == e["token"]
    t = body["timings"]
    steps = t["predicted_n"] - 1  # llama-server's n_gen_steps: the first token is free
    assert t["predicted_per_token_ms"] == (pytest.approx(t["predicted_ms"] / steps) if steps > 0 else 0.0)
    assert t["prompt_per_token_ms"] == pytest.approx(t["prompt_ms"] / t["prompt_n"])


def test_post_sampling_probs_and_generation_settings(state):
    """post_sampling_probs: the probabilities among the sampler chain's candidates (llama-server's
    "prob" / "top_probs"): top_k 2 leaves two candidates whose probabilities sum to 1, the chosen
    token's among them; greedy leaves one, at 1.  The same per token in a stream.  The final
    response carries generation_settings with the request's values."""
    req = {"prompt": "The capital of France is", "n_predict": 3, "temperature": 1.0, "top_k": 2, "top_p": 1.0,
           "min_p": 0.0, "seed": 7, "n_probs": 5, "post_sampling_probs": True}
    body = _call(state, "POST", "/completion", json=req).json()
    probs = body["completion_probabilities"]
    assert len(probs) == body["tokens_predicted"] == 3
    for e in probs:
        assert set(e) == {"id", "token", "bytes", "prob", "top_probs"}
        top = e["top_probs"]
        assert len(top) == 2 and sum(t["prob"] for t in top) == pytest.approx(1.0, abs=1e-5)
        assert e["prob"] == next(t["prob"] for t in top if t["id"] == e["id"]) > 0
        assert all(set(t) == {"id", "token", "bytes", "prob"} for t in top)
    g = body["generation_settings"]
    assert (g["temperature"], g["top_k"], g["seed"], g["n_predict"], g["n_probs"], g["post_sampling_probs"]) == (1.0, 2, 7, 3, 5, True)
    greedy = _call(state, "POST", "/completion", json=req | {"temperature": 0}).json()["completion_probabilities"]
    assert all(e["prob"] == 1.0 and [t["id"] for t in e["top_probs"]] == [e["id"]] for e in greedy)
    r = _call(state, "POST", "/completion", json=req | {"stream": True})
    chunks = [json.loads(ln[len("data: "):]) for ln in r.text.split("\n\n") if ln.startswith("data: ")]
    streamed = [c["completion_probabilities"][0] for c in chunks if not c["stop"]]
    assert [e["id"] for e in streamed] == [e["id"] for e in probs]  # the same seed: the same tokens and probabilities
    assert [e["prob"] for e in streamed] == pytest.approx([e["prob"] for e in probs])


def test_chat_stream_ends_with_done(state):
    r = _call(state, "POST", "/v1/chat/completions",
              json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [ln[len("data: "):] for ln in r.text.split("\n\n") if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] in ("length", "stop") and final["usage"]["completion_tokens"] <= 4
    assert chunks[0]["choices"][0]["delta"]["content"] is None  # llama-server's role chunk
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    r2 = _call(state, "POST", "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0})
    assert r2.json()["choices"][0]["message"]["content"] == streamed


def test_errors_in_openai_shape(state):
    r = _call(state, "POST", "/v1/completions", json={"prompt": "x" * 300, "max_tokens": 2})
    assert r.status_code == 400
    n = len(state.model.tokenize("x" * 300, add_special=True, parse_special=True))
    assert r.json()["error"] == {
        "message": f"request ({n} tokens) exceeds the available context size (256 tokens), try increasing it: "
                   "each of the 4 slots holds 256 (-c 1024 / -np 4); use --kv-unified or a larger -c",
        "type": "exceed_context_size_error", "code": 400, "n_prompt_tokens": n, "n_ctx": 256}
    r = _call(state, "POST", "/v1/completions", json={"prompt": "hi", "temperature": -1})
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]
    r = _call(state, "POST", "/v1/chat/completions", json={"messages": [{"role": "wizard", "content": "x"}]})
    assert r.status_code == 400 and "messages.0.role" in r.json()["error"]["message"]
    r = _call(state, "POST", "/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]
    r = _call(state, "GET", "/v1/nothing")
    assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "code"}
    r = _call(state, "POST", "/detokenize", json={"tokens": [10**6]})
    assert r.status_code == 400 and "out of range" in r.json()["error"]["message"]


def test_api_key(tiny):
    with serving_state(tiny, n_ctx=512, np_=1, n_batch=64, api_key="sekrit") as st:
        assert _call(st, "GET", "/health").status_code == 200
        assert _call(st, "GET", "/v1/models").status_code == 401
        assert _call(st, "GET", "/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        r = _call(st, "GET", "/v1/models", headers={"Authorization": "Bearer sekrit"})
        assert r.status_code == 200 and r.json()["data"][0]["id"] == "test-model"


def test_tokenize_detokenize_props_slots_metrics(state):
    ids = _call(state, "POST", "/tokenize", json={"content": "hello world"}).json()["tokens"]
    assert ids == state.model.tokenize("hello world", add_special=False, parse_special=True)
    assert _call(state, "POST", "/detokenize", json={"tokens": ids}).json()["content"] == "hello world"
    props = _call(state, "GET", "/props").json()
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 256
    # what llama-server's web UI and clients read besides: the file type, the modalities, the endpoints, BOS / EOS
    from llamapy.gguf.ftype import ftype_name

    assert props["model_ftype"] == ftype_name(state.model.gguf.get("general.file_type"))
    assert props["modalities"] == {"vision": False, "audio": False} and props["endpoint_props"] is False
    assert props["endpoint_slots"] is True and props["endpoint_metrics"] is True
    vocab = state.model.tokenizer.vocab
    assert props["bos_token"] == state.model.tokenizer.token_to_piece(vocab.special["bos"]).decode()
    slots = _call(state, "GET", "/slots").json()
    assert [s["n_ctx"] for s in slots] == [256] * 4 and all("state" in s for s in slots)
    # a decode of this test's own, so the counter below is not left to the tests before it
    assert _call(state, "POST", "/v1/completions", json={"prompt": "hello", "max_tokens": 2}).status_code == 200
    text = _call(state, "GET", "/metrics").text
    lines = dict(ln.rsplit(" ", 1) for ln in text.splitlines() if not ln.startswith("#"))
    assert int(lines["llamacpp:kv_cells_total"]) == 1024
    assert int(lines["llamacpp:kv_cells_used"]) == state.ctx.memory.n_used()
    assert int(lines["llamacpp:n_decode_total"]) == state.scheduler.metrics.n_decode_total > 0


@pytest.mark.parametrize("route", ["/v1/completions", "/completion"])
def test_stream_survives_unicode_line_ends(state, route):
    """Text holding U+2028, U+0085 and U+2029 (a grammar forces them; sampling reaches them
    by chance) streams as whole events to a reader that splits lines as str.splitlines does:
    httpx's aiter_lines."""
    text = "a\u2028b\u0085c\u2029d"
    gbnf = "root ::= " + json.dumps(text, ensure_ascii=False)

    async def go() -> list[str]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)), base_url="http://test") as c:
            body = {"prompt": "hi", "max_tokens": 32, "n_predict": 32, "temperature": 0, "stream": True, "grammar": gbnf}
            async with c.stream("POST", route, json=body) as r:
                assert r.status_code == 200
                return [ln async for ln in r.aiter_lines() if ln]

    lines = asyncio.run(go())
    assert all(ln.startswith("data: ") for ln in lines), lines
    events = [json.loads(ln[len("data: "):]) for ln in lines if ln != "data: [DONE]"]
    got = "".join(e["choices"][0]["text"] if "choices" in e else e["content"] for e in events)
    assert got == text


def test_prompt_too_long_is_llama_servers_error_on_a_real_server(state):
    """llama-server's exceed_context_size_error (server-context.cpp: "request (N tokens) exceeds
    the available context size (M tokens)", n_prompt_tokens, n_ctx = the slot's) on every
    completion route, streamed or not, through uvicorn on 127.0.0.1 (the suite's
    test_context_size_exceeded[_stream], test_ctx_shift_disabled_long_prompt)."""
    from server_harness import uvicorn_server

    msgs = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}] * 30
    with uvicorn_server(state) as url:
        for path, body in (("/chat/completions", {"messages": msgs}), ("/completion", {"prompt": "x" * 300}),
                           ("/v1/completions", {"prompt": "x" * 300})):
            for stream in (False, True):
                r = httpx.post(url + path, json={**body, "stream": stream, "max_tokens": 2}, timeout=60)
                assert r.status_code == 400, (path, stream, r.text)
                err = r.json()["error"]
                assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == 256, (path, err)
                assert err["n_prompt_tokens"] > 256
                assert "exceeds the available context size" in err["message"]


def test_metrics_header_and_n_tokens_max_on_a_real_server(state):
    """/metrics carries llama-server's Process-Start-Time-Unix header and its n_tokens_max
    counter: the longest sequence a slot held (prompt + generation), as the suite's
    test_metrics_prometheus_format reads them."""
    from server_harness import uvicorn_server

    with uvicorn_server(state) as url:
        r = httpx.post(url + "/completion", json={"prompt": "a b c d e f", "n_predict": 5, "ignore_eos": True}, timeout=60)
        t = r.json()["timings"]
        m = httpx.get(url + "/metrics", timeout=30)
        assert int(m.headers["Process-Start-Time-Unix"]) == state.t_created
        lines = m.text.splitlines()
        assert "# TYPE llamacpp:n_tokens_max counter" in lines
        n_max = int(next(ln.split()[1] for ln in lines if ln.startswith("llamacpp:n_tokens_max ")))
        # the last sampled token is never decoded: prompt + generated - 1 cells at most
        assert n_max >= t["prompt_n"] + t["predicted_n"] - 1


def test_generation_rate_excludes_the_first_token(tiny):
    """llama-server's predicted_per_second and /metrics' predicted_tokens_seconds are over decode
    steps: the first token comes from the prompt's last batch, so one token is 0.0 tokens/s and
    16 tokens are 15 steps over predicted_ms (the suite's
    test_metrics_generation_rate_excludes_first_token).  A fresh server, so /metrics counts
    these two requests only."""
    with serving_state(tiny, n_ctx=256, np_=1, n_batch=64) as st:
        req = {"prompt": "I believe", "ignore_eos": True, "temperature": 0.0}
        t1 = _call(st, "POST", "/completion", json=req | {"n_predict": 1}).json()["timings"]
        assert t1["predicted_n"] == 1 and t1["predicted_per_second"] == 0.0 and t1["predicted_per_token_ms"] == 0.0
        t = _call(st, "POST", "/completion", json=req | {"n_predict": 16}).json()["timings"]
        assert t["predicted_n"] == 16
        assert t["predicted_per_second"] == pytest.approx(1e3 / t["predicted_ms"] * 15, rel=1e-9)
        assert t["predicted_per_token_ms"] == pytest.approx(t["predicted_ms"] / 15, rel=1e-9)
        m = dict(ln.split() for ln in _call(st, "GET", "/metrics").text.splitlines() if not ln.startswith("#"))
        assert float(m["llamacpp:tokens_predicted_total"]) == 17
        rate = 15 / float(m["llamacpp:tokens_predicted_seconds_total"])
        assert float(m["llamacpp:predicted_tokens_seconds"]) == pytest.approx(rate, rel=1e-4)  # (printed with %g)


def test_completion_stream_progress_and_timings_per_token(tiny):
    """/completion's stream with llama-server's return_progress and timings_per_token: a chunk
    with prompt_progress (and the timings) before the first prompt batch -- every timing 0 --
    and after each batch (n_batch 32: several), prompt_ms never going back; each token's chunk
    with its timings.  Without the flags, neither (the suite's test_metrics_timings_on_prompt_progress)."""
    prompt = "the quick brown fox jumps over the lazy dog " * 8
    req = {"prompt": prompt, "n_predict": 4, "stream": True, "ignore_eos": True, "temperature": 0.0}

    def chunks(body: dict) -> list[dict]:
        r = _call(st, "POST", "/completion", json=body)
        return [json.loads(ln[len("data: "):]) for ln in r.text.split("\n\n") if ln.startswith("data: ")]

    with serving_state(tiny, n_ctx=512, np_=1, n_batch=32) as st:
        n_prompt = len(_call(st, "POST", "/tokenize", json={"content": prompt, "add_special": True}).json()["tokens"])
        got = chunks(req | {"timings_per_token": True, "return_progress": True})
        plain = chunks(req | {"cache_prompt": False, "prompt": "x " + prompt})
    prog = [c for c in got if "prompt_progress" in c]
    assert len(prog) == 1 + -(-n_prompt // 32) > 2 and all(c["tokens"] == [] and c["content"] == "" for c in prog)
    first = prog[0]["timings"]
    assert (first["prompt_n"], first["prompt_ms"], first["predicted_n"], first["predicted_ms"]) == (0, 0.0, 0, 0.0)
    ms = [c["timings"]["prompt_ms"] for c in prog]
    assert ms == sorted(ms) and ms[-1] > 0 and all(v >= 0 for c in prog for v in c["timings"].values())
    assert [c["prompt_progress"]["processed"] for c in prog][-1] == prog[-1]["prompt_progress"]["total"] == n_prompt
    toks = [c for c in got if c.get("tokens")]
    assert len(toks) == 4 and [c["timings"]["predicted_n"] for c in toks] == [1, 2, 3, 4]
    assert got[-1]["stop"] and got[-1]["timings"]["prompt_n"] == n_prompt
    assert not any("prompt_progress" in c or ("timings" in c and not c["stop"]) for c in plain)
