"""A real uvicorn server on 127.0.0.1 (free port): the official openai client, a client that
disconnects mid-stream, a bounded load test; and, on SmolLM2, batched == alone end to end."""
from __future__ import annotations

import asyncio
import json
import statistics
import time

import httpx
import pytest
from server_harness import assert_same_or_near_tie, serving_state, uvicorn_server


def test_openai_client(tiny):
    openai = pytest.importorskip("openai")
    with serving_state(tiny, n_ctx=1024, np_=2, n_batch=64) as st, uvicorn_server(st) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list()] == ["test-model"]
        chat = client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0)
        assert chat.choices[0].finish_reason in ("length", "stop") and chat.usage.completion_tokens <= 4
        cmpl = client.completions.create(model="test-model", prompt="hello", max_tokens=4, temperature=0)
        assert cmpl.usage.prompt_tokens == len(tiny.tokenize("hello", add_special=True, parse_special=True))
        parts = []
        for ch in client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=4, temperature=0, stream=True):
            if ch.choices and ch.choices[0].delta.content:
                parts.append(ch.choices[0].delta.content)
        assert "".join(parts) == chat.choices[0].message.content
        with pytest.raises(openai.BadRequestError) as ei:
            client.completions.create(model="test-model", prompt="x" * 600, max_tokens=4)
        assert "each of the 2 slots holds 512 (-c 1024 / -np 2)" in str(ei.value)


def test_disconnect_frees_slot(tiny):
    # slots of 4096 cells and no end of generation: the stream is still running when it is cut
    with serving_state(tiny, n_ctx=8192, np_=2, n_batch=64) as st, uvicorn_server(st) as base:
        with httpx.Client(base_url=base, timeout=30) as c:
            with c.stream("POST", "/v1/completions", json={"prompt": "hello", "max_tokens": 100000, "stream": True,
                                                           "temperature": 1.0, "ignore_eos": True}) as r:
                n = 0
                for line in r.iter_lines():
                    n += line.startswith("data: ")
                    if n >= 3:
                        break
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                slots = c.get("/slots").json()
                if all(s["state"] == "idle" for s in slots):
                    break
                time.sleep(0.1)
            assert all(s["state"] == "idle" for s in slots), slots
            assert st.scheduler.metrics.n_requests_cancelled == 1
            assert st.ctx.memory.n_used() == 0  # cancel removed the slot's cells


async def _stream_one(c: httpx.AsyncClient, prompt: str, max_tokens: int) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    ttft, n, finish = -1.0, 0, ""
    async with c.stream("POST", "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0}) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            assert "error" not in d, d
            if ttft < 0:
                ttft = time.perf_counter() - t0
            if d["choices"][0]["finish_reason"]:
                finish, n = d["choices"][0]["finish_reason"], d["usage"]["completion_tokens"]
    return ttft, n, finish


@pytest.mark.slow
def test_load_32_streams_np8(tiny):
    with serving_state(tiny, n_ctx=4096, np_=8, n_batch=256) as st, uvicorn_server(st) as base:
        async def go():
            async with httpx.AsyncClient(base_url=base, timeout=120) as c:
                prompts = [f"request {i}: " + "the " * (3 + 5 * (i % 7)) for i in range(32)]
                t0 = time.perf_counter()
                res = await asyncio.gather(*(_stream_one(c, p, 4) for p in prompts))
                return res, time.perf_counter() - t0

        res, wall = asyncio.run(go())
    assert all(f in ("length", "stop") for _, _, f in res)
    ttfts = sorted(t for t, _, _ in res)
    n_tok = sum(n for _, n, _ in res)
    p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]
    print(f"\nload: 32 streams vs -np 8: {n_tok} tokens in {wall:.2f} s = {n_tok / wall:.1f} tok/s; "
          f"TTFT p50 {statistics.median(ttfts) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms; "
          f"busy slots per decode {st.scheduler.metrics.n_busy_slots_total / st.scheduler.metrics.n_decode_total:.2f}")
    assert st.scheduler.metrics.n_requests_finished == 32
    m = st.scheduler.metrics
    # the scheduler batched: 32 requests on 8 slots share decode calls (one at a time: 1.0)
    assert m.n_busy_slots_total / m.n_decode_total > 4, (m.n_busy_slots_total, m.n_decode_total)


@pytest.mark.slow
def test_batched_equals_alone_smollm2(smollm2):
    """temperature 0: each request's text is the same alone and alongside 7 others of different
    prompt lengths (the mask keeps sequences apart), or differs first at a near tie (the
    batch's rounding; a token the model is sure of never changes)."""
    prompts = ["The capital of France is", "List three colors:", "def fib(n):",
               "Once upon a time, in a small village by the sea, there lived an old fisherman who",
               "1, 2, 3, 4,", "Water boils at", "The quick brown fox jumps over the lazy dog. The quick brown fox",
               "Hello"]
    body = lambda p: {"prompt": p, "max_tokens": 5, "temperature": 0}  # noqa: E731
    with serving_state(smollm2, n_ctx=2048, np_=8, n_batch=128) as st, uvicorn_server(st) as base:
        async def run(ps):
            async with httpx.AsyncClient(base_url=base, timeout=300) as c:
                rs = await asyncio.gather(*(c.post("/v1/completions", json=body(p)) for p in ps))
                return [r.json()["choices"][0]["text"] for r in rs]

        probe = [0, 3, 7]  # shortest-but-one, longest, shortest prompt: each alone, one at a time
        alone = [asyncio.run(run([prompts[i]]))[0] for i in probe]
        n_dec = st.scheduler.metrics.n_decode_total
        busy = st.scheduler.metrics.n_busy_slots_total
        together = asyncio.run(run(prompts))
        n_dec, busy = st.scheduler.metrics.n_decode_total - n_dec, st.scheduler.metrics.n_busy_slots_total - busy
        assert_same_or_near_tie(base, [prompts[i] for i in probe], [together[i] for i in probe], alone, 5)
    assert all(together)
    assert busy / n_dec > 4  # they really ran side by side
