"""`llamapy serve`: llama-server's flags, HTTP up first (/health answers 503 while the model
loads), then the model, the context and the scheduler thread; SIGINT/SIGTERM end every
in-flight request with a final event and exit 0."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from .log import logger, setup_logging

MiB = 1024 * 1024
AUTO_SLOTS = 4  # llama-server: -np unset -> 4 slots sharing one unified cache


def add_parser(sub, common) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server with continuous batching")
    common._add_model(p)
    common._add_context(p)
    common._add_speculative(p)
    p.set_defaults(parallel=None, fn=cmd_serve)  # -np unset: auto (4 slots, unified cache)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080, help="0: any free port")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer <key>' (not on /health)")
    p.add_argument("--metrics", action="store_true", help="enable the Prometheus /metrics endpoint")
    p.add_argument("-a", "--alias", default=None, help="model name reported by /v1/models")
    p.add_argument("-v", "--verbose", action="store_true", help="log every HTTP request")


def resolve_parallel(n_parallel: int | None, kv_unified: bool) -> tuple[int, bool]:
    """llama-server's auto mode: no -np gives 4 slots over a unified cache; an explicit -np
    splits -c between the slots unless --kv-unified."""
    if n_parallel is None:
        return AUTO_SLOTS, True
    if n_parallel < 1:
        raise ValueError(f"-np ({n_parallel}) must be >= 1 (leave it unset for auto: {AUTO_SLOTS} slots, unified cache)")
    return n_parallel, kv_unified


def _load(a: argparse.Namespace, state) -> None:
    """Model, context, scheduler; then publish them to the routes (the server turns ready)."""
    from .cli_cmds import _ctx_params, _spec_params
    from .context import Context
    from .model.model import Model
    from .server.scheduler import Scheduler

    log = logger("srv")
    n_par, unified = resolve_parallel(a.parallel, a.kv_unified)
    params = _ctx_params(a)
    params.n_seq_max, params.kv_unified = n_par, unified
    model = Model.load(a.model, device=a.device)
    ctx = Context(model, params)
    rep = ctx.memory_report()
    log.info(f"load_model: memory: model {rep['model'] / MiB:.2f} MiB, KV cache {(rep['kv_k'] + rep['kv_v']) / MiB:.2f} MiB "
             f"(K {rep['kv_k'] / MiB:.2f} + V {rep['kv_v'] / MiB:.2f}), output {rep['output'] / MiB:.2f} MiB")
    c = ctx.cparams
    if c.kv_unified:
        log.info(f"load_model: {c.n_seq_max} slots share one unified cache of {c.n_ctx} cells; each request may use up to {c.n_ctx_seq}")
    else:
        log.info(f"load_model: {c.n_seq_max} slots, each holds {c.n_ctx_seq} cells (-c {c.n_ctx} / -np {c.n_seq_max})")
    for i in range(c.n_seq_max):
        logger("slot").info(f"load_model: id {i:2d} | task -1 | new slot, n_ctx = {c.n_ctx_seq}")
    spec = _spec_params(a)
    proposers = None
    if spec.type != "none":
        from .speculative.proposer import make_proposers

        proposers = make_proposers(spec, model, params, c.n_seq_max)
        log.info(f"load_model: speculative decoding: {spec.type}, up to {spec.draft_len} draft tokens per slot and step")
    sched = Scheduler(ctx, spec, proposers)
    sched.start()
    state.alias = a.alias or model.path.stem
    state.attach(model, ctx, sched)


def cmd_serve(a: argparse.Namespace) -> int:
    import uvicorn

    from .server.bridge import ServerState
    from .server.http import create_app

    setup_logging(verbose=True)
    log = logger("main")
    resolve_parallel(a.parallel, a.kv_unified)  # bad -np fails before anything starts
    from .cli_cmds import _spec_params

    _spec_params(a)  # so do bad --spec-* flags
    state = ServerState(api_key=a.api_key, metrics=a.metrics)
    config = uvicorn.Config(create_app(state), host=a.host, port=a.port, log_level="info" if a.verbose else "warning",
                            access_log=a.verbose, timeout_graceful_shutdown=10)
    server = _Server(config, state)
    failed: list[BaseException] = []

    def loader() -> None:
        try:
            _load(a, state)
        except BaseException as e:  # noqa: BLE001 - reported, then the server stops
            failed.append(e)
            server.should_exit = True
            return
        while not server.started and not server.should_exit:
            time.sleep(0.01)
        host, port = server.bound()
        log.info(f"server is listening on http://{host}:{port} - starting the main loop")
        print(f"ready: http://{host}:{port}", flush=True)

    t0 = time.perf_counter()
    threading.Thread(target=loader, name="llamapy-loader", daemon=True).start()
    server.run()
    if state.scheduler is not None:
        state.scheduler.stop(join=True, timeout=30)
    if failed:
        print(f"error: {failed[0]}", file=sys.stderr)
        return 1
    log.info(f"server stopped after {time.perf_counter() - t0:.1f} s")
    return 0


class _Server:
    """uvicorn.Server whose SIGINT/SIGTERM first ends every request with a final event."""

    def __new__(cls, config, state):
        import uvicorn

        class Server(uvicorn.Server):
            def handle_exit(self, sig, frame) -> None:  # runs in the main thread
                """Like uvicorn's, but the signal is not re-raised after shutdown: exit 0."""
                if state.scheduler is not None:
                    state.scheduler.stop()
                if self.should_exit and sig == signal.SIGINT:
                    self.force_exit = True  # a second Ctrl-C: stop waiting for streams
                self.should_exit = True

            def bound(self) -> tuple[str, int]:
                for srv in getattr(self, "servers", []):
                    for sock in srv.sockets:
                        h, p = sock.getsockname()[:2]
                        return h, p
                return config.host, config.port

        return Server(config)
