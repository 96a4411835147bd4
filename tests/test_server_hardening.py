"""The server against hostile or careless clients: a bounded queue (503 + Retry-After), a
request deadline (504), a body limit (413), disconnects and slow readers, the API key on
every route but /health, /slots only with --slots."""
from __future__ import annotations

import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_harness import serving_state, step_all, uvicorn_server

from llamapy import Context, ContextParams
from llamapy.sampling import SamplingParams
from llamapy.server.scheduler import Scheduler

from llamapy.server.bridge import ServerState
from llamapy.server.http import create_app
from llamapy.server.request import Event, Request
from llamapy.server.webui_routes import is_webui_path


def _long(max_tokens: int = 100000, stream: bool = True) -> dict:
    return {"prompt": "hello", "max_tokens": max_tokens, "stream": stream, "temperature": 1.0, "ignore_eos": True}


def _wait(pred, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False


def test_queue_full_is_503_with_retry_after(smollm2):
    """-np 1, --max-queue 2: one running (a long stream: SmolLM2, as the tiny model ends
    thousands of tokens before a request can queue), two waiting, the fourth refused; once
    the stream goes away the waiting ones run."""
    with serving_state(smollm2, n_ctx=4096, np_=1, n_batch=64, max_queue=2) as st, uvicorn_server(st) as base:
        sched = st.scheduler
        with httpx.Client(base_url=base, timeout=60) as c, ThreadPoolExecutor(2) as ex:
            with c.stream("POST", "/v1/completions", json=_long(3000)) as running:
                lines = running.iter_lines()  # kept: a dropped iterator closes the response
                next(lines)
                waiting = [ex.submit(httpx.post, base + "/v1/completions", json=_long(5, stream=False), timeout=120) for _ in range(2)]
                assert _wait(lambda: sched._n_queued == 2)
                r = httpx.post(base + "/v1/completions", json=_long(5, stream=False), timeout=30)
                assert r.status_code == 503 and r.headers["retry-after"] == "1"
                err = r.json()["error"]
                assert "2 requests already wait for the 1 slots (--max-queue 2)" in err["message"] and err["type"] == "unavailable_error"
            assert all(f.result().status_code == 200 for f in waiting)
        assert httpx.post(base + "/v1/completions", json=_long(3, stream=False), timeout=30).status_code == 200
        assert sched._n_queued == 0


def test_timeout_ends_running_and_waiting_requests(tiny):
    # 8192 cells: the tiny model fills 1024 in about 0.7 s here, so a faster CPU would end the
    # endless requests by the slot's size ("length") before their 0.5 s deadline
    with serving_state(tiny, n_ctx=8192, np_=1, n_batch=64) as st, uvicorn_server(st) as base:
        st.timeout = 0.5
        ra = httpx.post(base + "/v1/completions", json=_long(stream=False), timeout=60)
        assert ra.status_code == 504 and "past --timeout 0.5 s" in ra.json()["error"]["message"]
        assert ra.json()["error"]["type"] == "timeout_error"
        # one that never gets the slot: it ends while waiting
        ids = tiny.tokenize("hello")
        long_ev: list[Event] = []
        short_ev: list[Event] = []
        st.scheduler.submit(Request(ids, max_tokens=100000, ignore_eos=True, timeout=30, sink=long_ev.append))
        assert _wait(lambda: not st.scheduler.slots[0].is_idle)
        st.scheduler.submit(Request(ids, max_tokens=5, timeout=0.3, sink=short_ev.append))
        assert _wait(lambda: bool(short_ev) and short_ev[-1].final)
        assert short_ev[-1].finish_reason == "timeout" and "for a slot, past --timeout 0.3 s" in short_ev[-1].error
        st.scheduler.cancel(long_ev and long_ev[0].request_id or st.scheduler.slots[0].request.id)
        assert _wait(lambda: bool(long_ev) and long_ev[-1].final)
        with httpx.stream("POST", base + "/v1/completions", json=_long(), timeout=60) as r:
            lines = [x for x in r.iter_lines() if x.startswith("data: ")]
        assert "past --timeout" in json.loads(lines[-2][6:])["error"]["message"] and lines[-1] == "data: [DONE]"
        assert st.ctx.memory.n_used() == 0 and all(s.is_idle for s in st.scheduler.slots)


def test_request_settings_that_break_its_sampler_end_only_that_request(tiny, monkeypatch):
    """A repeat_last_n past any deque's size is the context's window (200, tokens out); a
    request whose sampler cannot be made ends with an error event of its own, and the next
    request is served (before: the request vanished and its client waited for ever)."""
    with serving_state(tiny, n_ctx=1024, np_=1, n_batch=64) as st, uvicorn_server(st) as base:
        r = httpx.post(base + "/v1/completions", json={"prompt": "hello", "max_tokens": 3, "repeat_last_n": 2**70,
                                                                   "ignore_eos": True},
                       timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        import llamapy.server.scheduler as sched

        real = sched.Sampler

        def broken(params, **kw):
            if params.seed == 12345:
                raise OverflowError("the window is too large")
            return real(params, **kw)

        monkeypatch.setattr(sched, "Sampler", broken)
        ev: list[Event] = []
        st.scheduler.submit(Request(tiny.tokenize("hello"), max_tokens=3, sampling=SamplingParams(seed=12345),
                                    sink=ev.append))
        assert _wait(lambda: bool(ev) and ev[-1].final)
        assert ev[-1].finish_reason == "error" and "the window is too large" in ev[-1].error
        ok = httpx.post(base + "/v1/completions", json={"prompt": "hello", "max_tokens": 2, "ignore_eos": True},
                        timeout=60)
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2
        assert all(s.is_idle for s in st.scheduler.slots)


def test_body_limit_413(tiny):
    with serving_state(tiny, n_ctx=1024, np_=1, n_batch=64) as st, uvicorn_server(st) as base:
        st.max_body = 2048
        big = {"prompt": "x" * 4000, "max_tokens": 1}
        r = httpx.post(base + "/v1/completions", json=big, timeout=30)
        assert r.status_code == 413 and "the limit is 2,048 bytes" in r.json()["error"]["message"]

        def chunks():  # no Content-Length: read up to the limit, refused past it
            for _ in range(10):
                yield b"x" * 1000
        r = httpx.post(base + "/v1/completions", content=chunks(), headers={"content-type": "application/json"}, timeout=30)
        assert r.status_code == 413
        ok = httpx.post(base + "/v1/completions", json={"prompt": "x" * 100, "max_tokens": 1}, timeout=30)
        assert ok.status_code == 200


def test_disconnect_frees_slot_and_cells_in_a_step(tiny):
    """A streaming client that goes away: /slots and /metrics show its slot idle and its
    cells gone, at most two scheduler steps after the server learned of it.  (Slots of 4096
    cells: the endless stream must not end by its size before the server sees the client go.)"""
    with serving_state(tiny, n_ctx=8192, np_=2, n_batch=64) as st, uvicorn_server(st) as base:
        sched = st.scheduler
        with httpx.Client(base_url=base, timeout=30) as c:
            with c.stream("POST", "/v1/completions", json=_long()) as r:
                for i, _ in enumerate(r.iter_lines()):
                    if i > 4:
                        break
            assert _wait(lambda: sched.metrics.n_requests_cancelled == 1)
            steps_at_cancel = sched.metrics.n_decode_total
            assert _wait(lambda: all(s["state"] == "idle" for s in c.get("/slots").json()))
            assert sched.metrics.n_decode_total - steps_at_cancel <= 2
            m = c.get("/metrics").text
        assert "llamacpp:requests_processing 0" in m and "llamacpp:kv_cache_tokens 0" in m.replace(".0", "")
        assert st.ctx.memory.n_used() == 0


def test_slow_reader_never_stalls_other_slots(tiny):
    """A client that asks for a long stream and never reads it: the other slots' requests
    finish about as fast as with no such client (a scheduler that waited on the stalled
    socket would not finish them at all, or take seconds)."""
    with serving_state(tiny, n_ctx=2048, np_=4, n_batch=64) as st, uvicorn_server(st) as base:
        host, port = base.removeprefix("http://").split(":")

        def timed() -> float:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(3) as ex:
                rs = list(ex.map(lambda _: httpx.post(base + "/v1/completions", json=_long(200, stream=False), timeout=60), range(3)))
            assert all(r.status_code == 200 for r in rs)
            return time.perf_counter() - t0

        alone = timed()
        sock = socket.create_connection((host, int(port)))
        body = json.dumps(_long(600)).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # and never read
        try:
            assert _wait(lambda: sum(not s.is_idle for s in st.scheduler.slots) == 1)
            beside = timed()
            assert beside < 5 * alone + 2.0, (alone, beside)  # loose: the CPU is shared with the test
        finally:
            sock.close()
        assert _wait(lambda: all(s.is_idle for s in st.scheduler.slots))


def test_api_key_on_every_route_but_health(tiny):
    """Every route needs the key but /health and the web UI's static files (docs/webui.md)."""
    with serving_state(tiny, n_ctx=1024, np_=1, n_batch=64, api_key="s3cret") as st, uvicorn_server(st) as base:
        def walk(routes):
            for r in routes:
                sub = getattr(getattr(r, "original_router", None), "routes", None) or getattr(r, "routes", None)
                yield from walk(sub) if sub else (r,)
        app = create_app(st)
        while not hasattr(app, "routes"):  # the FastAPI app inside its plain-ASGI wrappers (body limit, JSON body)
            app = app.app
        paths = {(m, r.path) for r in walk(app.routes) for m in getattr(r, "methods", ()) if m != "HEAD"}
        assert len(paths) >= 14 and ("POST", "/v1/chat/completions") in paths
        for method, path in sorted(paths):
            for auth in ({}, {"Authorization": "Bearer s3cre"}, {"Authorization": "Bearer s3cret-and-more"}):
                r = httpx.request(method, base + path, headers=auth, timeout=30, json={})
                if path in ("/health", "/v1/health"):
                    assert r.status_code == 200
                elif is_webui_path(path):  # the web UI's static pages and assets: they ask for the key
                    assert r.status_code in (200, 404), (method, path, r.status_code)  # 404: /webui/{name} itself
                else:
                    assert r.status_code == 401, (method, path, r.status_code)
        r = httpx.post(base + "/v1/completions", headers={"Authorization": "Bearer s3cret"}, json={"prompt": "a", "max_tokens": 1})
        assert r.status_code == 200


def test_slots_on_unless_turned_off():
    """/slots is on by default, as llama-server's (--no-slots turns it off: a 501 naming --slots)."""
    from llamapy.cli import build_parser

    assert build_parser().parse_args(["serve"]).slots is True
    assert build_parser().parse_args(["serve", "--no-slots"]).slots is False
    st = ServerState()
    app = create_app(st)

    async def get(path: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get(path)
    import asyncio
    r = asyncio.run(get("/slots"))
    assert r.status_code == 501 and "--slots" in r.json()["error"]["message"]


def test_no_prompt_in_logs(tiny, caplog, capfd):
    """No prompt in any llamapy log line, at any level, nor on stdout/stderr.  The test first
    proves it was listening: the library's INFO lines of the context's creation reached
    caplog (a logger left quiet or unpropagated by an earlier test would hide everything)."""
    secret = "purple-elephant-4242"
    with caplog.at_level(logging.DEBUG, logger="llamapy"):
        with serving_state(tiny, n_ctx=1024, np_=1, n_batch=64) as st, uvicorn_server(st) as base:
            r1 = httpx.post(base + "/v1/completions", json={"prompt": secret, "max_tokens": 3}, timeout=30)
            r2 = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": secret}], "max_tokens": 3}, timeout=30)
    assert r1.status_code == r2.status_code == 200
    heard = [r for r in caplog.records if r.name.startswith("llamapy.") and r.levelno == logging.INFO]
    assert heard, "caplog heard no llamapy INFO line: it was not listening"
    assert secret not in caplog.text
    out, err = capfd.readouterr()
    assert secret not in out and secret not in err


def test_kv_full_under_load_ends_only_what_cannot_go_on(tiny):
    """Four requests on a unified cache of 256 cells that cannot hold them all: the request
    the cache cannot continue ends with an error (llama-server's "Context size has been exceeded.")
    and the numbers; the others' tokens are
    those of each request alone, and the ended one's are the start of its own."""
    reqs = [(tiny.tokenize("hello " * 5), 60), (tiny.tokenize("world " * 8), 90), (tiny.tokenize("abc " * 3), 200),
            (tiny.tokenize("x " * 10), 70)]

    def run(rs, n_ctx: int):
        ctx = Context(tiny, ContextParams(n_ctx=n_ctx, n_batch=64, n_ubatch=64, n_seq_max=4, kv_unified=True))
        sched = Scheduler(ctx)
        evs: list[list[Event]] = []
        for ids, n in rs:
            ev: list[Event] = []
            evs.append(ev)
            sched.submit(Request(ids, max_tokens=n, ignore_eos=True, sampling=SamplingParams(temp=0.0), sink=ev.append))
        step_all(sched, evs)
        assert ctx.memory.n_used() <= n_ctx
        return [([e.token for e in ev if not e.final], ev[-1]) for ev in evs]

    together = run(reqs, 256)
    ended = [i for i, (toks, fin) in enumerate(together) if len(toks) < reqs[i][1]]
    assert ended, "the cache never filled: the test proves nothing"
    for i, (toks, fin) in enumerate(together):
        alone, _ = run([reqs[i]], 1024)[0]
        assert fin.finish_reason == ("error" if i in ended else "length")
        if i in ended:
            assert toks == alone[: len(toks)]
            assert "of 256 free" in fin.error and "this request held" in fin.error
        else:
            assert toks == alone and not fin.error
