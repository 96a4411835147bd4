"""Test helpers for the server: a scheduler + app over a loaded model, served in-process
(httpx ASGI transport) or by a real uvicorn on 127.0.0.1 and a free port, in a thread."""
from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import uvicorn

from llamapy import Context, ContextParams
from llamapy.server.bridge import ServerState
from llamapy.server.http import create_app
from llamapy.server.scheduler import Scheduler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import soak  # noqa: E402  (its near-tie check)


@contextlib.contextmanager
def serving_state(model, n_ctx: int = 2048, np_: int = 4, n_batch: int = 256, unified: bool = False,
                  api_key: str | None = None, spec=None, max_queue: int = 0) -> Iterator[ServerState]:
    """spec: a speculative.SpecParams for the server's drafts (None: none)."""
    params = ContextParams(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=min(n_batch, 512), n_seq_max=np_, kv_unified=unified)
    ctx = Context(model, params)
    proposers = None
    if spec is not None:
        from llamapy.speculative.proposer import make_proposers

        proposers = make_proposers(spec, model, params, np_)
    sched = Scheduler(ctx, spec, proposers, max_queue=max_queue)
    sched.start()
    state = ServerState(api_key=api_key, metrics=True, alias="test-model", slots=True)
    state.attach(model, ctx, sched)
    try:
        yield state
    finally:
        sched.stop(join=True, timeout=30)


def asgi_call(state: ServerState, method: str, path: str, **kw) -> httpx.Response:
    """One request to the server's app in this process (httpx's ASGI transport, no socket)."""

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)), base_url="http://test") as c:
            return await c.request(method, path, **kw)

    return asyncio.run(go())


@contextlib.contextmanager
def uvicorn_server(state: ServerState, http: str = "auto") -> Iterator[str]:
    """Base URL of a uvicorn server on 127.0.0.1 (ephemeral port) running create_app(state).
    http: uvicorn's protocol ("h11" is what `llamapy serve` runs)."""
    config = uvicorn.Config(create_app(state), host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=5, http=http)
    server = uvicorn.Server(config)
    t = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not t.is_alive():
            raise RuntimeError("uvicorn did not start within 20 s")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(10)


def step_all(sched: Scheduler, evs: list[list], max_steps: int = 3000) -> None:
    """Step a scheduler synchronously until every request's events (lists its sinks append
    to) end with a final event: the same requests always make the same batches."""
    for _ in range(max_steps):
        if all(e and e[-1].final for e in evs):
            return
        sched.update_slots()
    assert all(e and e[-1].final for e in evs), f"requests still running after {max_steps} steps"


def assert_same_or_near_tie(base: str, prompts: list[str], got: list[str], want: list[str], max_tokens: int,
                            ignore_eos: bool = False) -> None:
    """got == want, except where a text first differs at a near tie: the request alone on the
    server at `base`, with its top-2 probabilities, has p1 - p2 < soak.NEAR_TIE at that token
    (greedy outputs depend on the batch a request shares only through rounding: see the README)."""
    with httpx.Client(base_url=base, timeout=120) as c:
        for p, g, w in zip(prompts, got, want):
            if g == w:
                continue
            body = {"prompt": p, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": ignore_eos}
            margin = soak.tie_margin(c, soak.Job("greedy", "/v1/completions", body, text=g), w)
            assert margin < soak.NEAR_TIE, f"{p!r}: {g!r} != {w!r}, top-2 margin {margin:.3f} where they differ"


def ready_url(proc, timeout: float, lines: list[str]) -> str | None:
    """Read a `llamapy serve` subprocess's output (appended to lines) up to its `ready: URL`
    line: the URL, or None when the output ends or `timeout` seconds pass first."""
    import re

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return None
        lines.append(line.rstrip("\n"))
        if m := re.match(r"ready: (http://127\.0\.0\.1:\d+)$", lines[-1]):
            return m.group(1)
    return None


@contextlib.contextmanager
def serve_process(args: list[str], timeout: float = 120.0) -> Iterator[str]:
    """Base URL of a real `llamapy serve ARGS --port 0` in a subprocess (its `ready:` line),
    killed at the end."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "llamapy", "serve", *args, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    try:
        base = ready_url(proc, timeout, lines)
        if base is None:
            raise AssertionError("no ready line from llamapy serve:\n" + "\n".join(lines))
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep its pipe drained
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
