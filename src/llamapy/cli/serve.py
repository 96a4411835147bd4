"""`llamapy serve`: llama-server's flags, HTTP up first (/health answers 503 while the model
loads), then the model, the context and the scheduler thread.  SIGINT/SIGTERM: new requests
get 503, in-flight ones may finish for --shutdown-timeout seconds, the rest end with an
error event; exit 0.  A second SIGINT stops at once."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from ..log import logger, setup_logging
from .args import ctx_params, load_context, spec_params
from .flags import add_context, add_model, add_speculative

MiB = 1024 * 1024
AUTO_SLOTS = 4  # llama-server: -np unset -> 4 slots sharing one unified cache


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server with continuous batching")
    add_model(p)
    add_context(p)
    add_speculative(p)
    p.set_defaults(parallel=None, fn=cmd_serve)  # -np unset: auto (4 slots, unified cache)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080, help="0: any free port")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer <key>' (not on /health)")
    p.add_argument("--metrics", action="store_true", help="enable the Prometheus /metrics endpoint")
    p.add_argument("-a", "--alias", default=None, help="model name reported by /v1/models")
    p.add_argument("--slots", action=argparse.BooleanOptionalAction, default=True,
                   help="the /slots monitoring endpoint (default: on, as llama-server; --no-slots hides it: it shows prompts)")
    p.add_argument("--max-queue", type=int, default=None,
                   help="requests that may wait for a slot; one more gets 503 with Retry-After (default: 4 x -np)")
    p.add_argument("-to", "--timeout", type=float, default=600.0,
                   help="seconds a request may take, waiting included; then it ends with 504 (default: 600)")
    p.add_argument("--max-body", type=float, default=16.0, help="largest request body in MiB; larger is a 413 (default: 16)")
    p.add_argument("--shutdown-timeout", type=float, default=10.0,
                   help="on SIGTERM/SIGINT, seconds in-flight requests may take to finish (default: 10)")
    p.add_argument("-sps", "--slot-prompt-similarity", type=float, default=0.5,
                   help="reuse a slot's cache only when it shares more than this share of the prompt; "
                        "else take the least recently used slot (0: always the longest prefix; default: 0.5)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every HTTP request")
    g = p.add_argument_group("replicas on Ray Serve (replicas/): every other flag applies to each replica")
    g.add_argument("--replicas", type=int, default=None, help="llamapy servers behind one endpoint, routed by prefix")
    g.add_argument("--min-replicas", type=int, default=None, help="autoscaling: the fewest replicas (with --max-replicas)")
    g.add_argument("--max-replicas", type=int, default=None, help="autoscaling: the most replicas")
    g.add_argument("--ray-address", default=None, help="join this Ray cluster (default: $RAY_ADDRESS, else a local Ray)")
    g.add_argument("--routing", default="affinity", choices=("affinity", "round-robin"),
                   help="affinity: the replica holding the longest prompt prefix, unless its queue is clearly "
                        "longer (default); round-robin: in turn")


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
    from ..server.scheduler import Scheduler

    log = logger("srv")
    n_par, unified = resolve_parallel(a.parallel, a.kv_unified)
    params = ctx_params(a)
    params.n_seq_max, params.kv_unified = n_par, unified
    model, ctx = load_context(a, params)
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
    spec = spec_params(a)
    proposers = None
    if spec.type != "none":
        from ..speculative.proposer import make_proposers

        proposers = make_proposers(spec, model, params, c.n_seq_max)
        log.info(f"load_model: speculative decoding: {spec.type}, up to {spec.draft_len} draft tokens per slot and step")
    max_queue = a.max_queue if a.max_queue is not None else 4 * c.n_seq_max
    sched = Scheduler(ctx, spec, proposers, max_queue=max_queue, slot_prompt_similarity=a.slot_prompt_similarity)
    sched.start()
    log.info(f"load_model: up to {max_queue} requests wait for a slot (--max-queue); --timeout {a.timeout:g} s")
    state.alias = a.alias or model.path.stem
    state.attach(model, ctx, sched)


def cmd_serve(a: argparse.Namespace) -> int:
    import uvicorn

    from ..server.bridge import ServerState
    from ..server.http import create_app

    setup_logging(verbose=True)
    if a.replicas is not None or a.min_replicas is not None or a.max_replicas is not None:
        from ..replicas.app import run_replicas

        argv = list(getattr(a, "argv", None) or sys.argv[1:])
        return run_replicas(a, argv[argv.index("serve") + 1:] if "serve" in argv else argv)
    log = logger("main")
    tune_server_process()
    resolve_parallel(a.parallel, a.kv_unified)  # bad -np fails before anything starts
    spec_params(a)  # so do bad --spec-* flags
    for name, v in (("--max-queue", a.max_queue), ("--timeout", a.timeout), ("--max-body", a.max_body), ("--shutdown-timeout", a.shutdown_timeout)):
        if v is not None and v < 0:
            raise ValueError(f"{name} ({v:g}) must be >= 0")
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(f"listening on {a.host}: anyone who can reach this address can use the server"
                    + ("" if a.api_key else "; set --api-key"))
    state = ServerState(api_key=a.api_key, metrics=a.metrics, slots=a.slots, max_body=int(a.max_body * MiB),
                        timeout=a.timeout)
    config = uvicorn.Config(create_app(state), host=a.host, port=a.port, log_level="info" if a.verbose else "warning",
                            access_log=a.verbose, timeout_graceful_shutdown=10)
    server = _Server(config, state, a.shutdown_timeout)
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
        state.model.tokenizer.hf  # a server tokenizes many texts: the whole tokenizer now, not mid-load

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


def tune_server_process() -> None:
    """A long-running server process's settings (llamapy serve, and each replica of
    --replicas): glibc's heap (memory/heap.py tune_heap, with 2 arenas: each thread that
    allocates would get its own, up to 8 per core, which keeps what it freed, so the HTTP worker
    threads slowly grow the resident set; what the heap holds when the server goes idle is
    handed back by the scheduler's release_heap, malloc_trim) and oneDNN's primitive cache.
    oneDNN keeps a primitive (and its buffers) per GEMM shape it met, up to 1024 of them; a
    server's prefills meet a new row count at nearly every step, and a soak of 2,000 requests
    grew the resident set by ~40 MiB through it (found with memray).  16 bound it."""
    from ..memory.heap import tune_heap

    tune_heap(arenas=2)
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")


class _Server:
    """uvicorn.Server whose SIGINT/SIGTERM drains first: new requests get 503 while the
    in-flight ones have `grace` seconds to finish; then every request left ends with a final
    error event and the server stops."""

    def __new__(cls, config, state, grace: float = 10.0):
        import uvicorn

        class Server(uvicorn.Server):
            def handle_exit(self, sig, frame) -> None:  # runs in the main thread: must not block
                """Like uvicorn's, but draining first, and the signal is not re-raised: exit 0."""
                if state.draining:
                    if sig == signal.SIGINT:  # a second Ctrl-C: stop now
                        if state.scheduler is not None:
                            state.scheduler.stop()
                        self.should_exit = self.force_exit = True
                    return
                state.draining = True
                logger("main").info(f"shutting down: new requests get 503; in-flight ones have {grace:g} s to finish")
                threading.Thread(target=self._drain, name="llamapy-drain", daemon=True).start()

            def _drain(self) -> None:
                sched, deadline = state.scheduler, time.monotonic() + grace
                while sched is not None and sched.busy() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if sched is not None:
                    if sched.busy():
                        logger("main").info(f"shutting down: ending the requests still running after {grace:g} s")
                    sched.stop()  # what is left ends with "server is shutting down"
                self.should_exit = True

            def bound(self) -> tuple[str, int]:
                for srv in getattr(self, "servers", []):
                    for sock in srv.sockets:
                        h, p = sock.getsockname()[:2]
                        return h, p
                return config.host, config.port

        return Server(config)
