"""Test helpers for the server: a scheduler + app over a loaded model, served in-process
(httpx ASGI transport) or by a real uvicorn on 127.0.0.1 and a free port, in a thread."""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

import uvicorn

from llamapy import Context, ContextParams
from llamapy.server.bridge import ServerState
from llamapy.server.http import create_app
from llamapy.server.scheduler import Scheduler


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


@contextlib.contextmanager
def uvicorn_server(state: ServerState) -> Iterator[str]:
    """Base URL of a uvicorn server on 127.0.0.1 (ephemeral port) running create_app(state)."""
    config = uvicorn.Config(create_app(state), host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=5)
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
