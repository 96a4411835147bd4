"""`llamapy serve`: llama-server's flags, HTTP up first (/health answers 503 while the model
loads), then the model, the context and the scheduler thread.  SIGINT/SIGTERM: new requests
get 503, in-flight ones may finish for --shutdown-timeout seconds, the rest end with an
error event; exit 0.  A second SIGINT stops at once."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from dataclasses import replace

from ..log import logger, setup_logging
from ..server.cors import CorsSettings
from ..server.listen import bind_all, host_list
from ..server.settings import AUTO_SLOTS, ReplicaSettings, ServeSettings
from .args import ctx_params, pipe_params, spec_params
from .chat_flags import add_chat_template, chat_options
from .flags import add_context, add_embedding, add_model, add_speculative
from .lora_flags import add_lora, lora_specs
from .serve_flags import add_llama_server, cors_origins, request_defaults, server_tools, tools_runtime

SERVE_FLAGS_OWN = {"--replicas", "--min-replicas", "--max-replicas", "--ray-address", "--routing", "--host", "--port"}


def add_parser(sub) -> None:
    # allow_abbrev=False: llama-server has no abbreviations, and a prefix must not switch on a
    # longer flag (`--webui` would otherwise be taken as `--webui-mcp-proxy`, the CORS proxy)
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server with continuous batching", allow_abbrev=False)
    add_model(p)
    add_context(p)
    add_chat_template(p)
    add_speculative(p)
    add_embedding(p)
    p.set_defaults(parallel=None, fn=cmd_serve)  # -np unset: auto (4 slots, unified cache)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; a comma-separated list serves each on the one --port")
    p.add_argument("--port", type=int, default=8080, help="0: any free port")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer <key>' (not on /health); several keys: comma-separated")
    p.add_argument("--api-key-file", default=None, metavar="FNAME",
                   help="file of API keys, one per line; lines starting with # are comments (with --api-key: both)")
    p.add_argument("--metrics", action="store_true", help="enable the Prometheus /metrics endpoint (and /engine/events)")
    p.add_argument("--engine-events", action="store_true",
                   help="enable /engine/events, the per-step stream the web UI's /engine view draws (on with --metrics too)")
    p.add_argument("-a", "--alias", default=None,
                   help="model name reported by /v1/models and in every response; comma-separated: aliases, "
                        "the first in sorted order names the model (as llama-server)")
    p.add_argument("--tags", default=None, help="model tags, comma-separated, listed by /v1/models (informational)")
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
    add_llama_server(p)
    add_lora(p)
    g = p.add_argument_group("replicas on Ray Serve (replicas/): every other flag applies to each replica")
    g.add_argument("--replicas", type=int, default=None, help="llamapy servers behind one endpoint, routed by prefix")
    g.add_argument("--min-replicas", type=int, default=None, help="autoscaling: the fewest replicas (with --max-replicas)")
    g.add_argument("--max-replicas", type=int, default=None, help="autoscaling: the most replicas")
    g.add_argument("--ray-address", default=None, help="join this Ray cluster (default: $RAY_ADDRESS, else a local Ray)")
    g.add_argument("--routing", default="affinity", choices=("affinity", "round-robin"),
                   help="affinity: the replica holding the longest prompt prefix, unless its queue is clearly "
                        "longer (default); round-robin: in turn")


def serve_settings(a: argparse.Namespace) -> ServeSettings:
    """The parsed `serve` flags as the typed settings the server and each replica start from
    (built once, here).  Bad --spec-* and --pp / --tensor-split values fail here."""
    tools_runtime(a.tools_runtime)
    return ServeSettings(
        ctx=replace(ctx_params(a), n_seq_max=a.parallel if a.parallel is not None else AUTO_SLOTS),
        model=a.model, n_parallel=a.parallel, pipe=pipe_params(a), spec=spec_params(a), mmap=a.mmap,
        host=a.host, port=a.port, api_key=a.api_key, api_keys=api_keys(a.api_key, a.api_key_file), metrics=a.metrics, alias=a.alias, tags=a.tags, slots=a.slots,
        webui=not a.no_webui, engine_events=a.engine_events,
        max_queue=a.max_queue, timeout=a.timeout, max_body_mib=a.max_body, shutdown_timeout=a.shutdown_timeout,
        slot_prompt_similarity=a.slot_prompt_similarity, verbose=a.verbose, defaults=request_defaults(a), chat=chat_options(a),
        replicas=ReplicaSettings(a.replicas, a.min_replicas, a.max_replicas, a.ray_address, a.routing),
        embedding=a.embedding or a.reranking, pooling="rank" if a.reranking else a.pooling,
        embd_normalize=a.embd_normalize, slot_save_path=a.slot_save_path, ctx_shift=a.ctx_shift, n_keep=a.keep,
        n_cache_reuse=a.cache_reuse, cache_ram_mib=8192 if a.cache_ram is None else a.cache_ram,
        cache_ram_given=a.cache_ram is not None, cache_idle_slots=a.cache_idle_slots, props=a.props, lora=lora_specs(a),
        cors=CorsSettings(cors_origins(a.cors_origins, server_tools(a.tools)), a.cors_methods, a.cors_headers, a.cors_credentials),
        ui_mcp_proxy=a.ui_mcp_proxy, server_tools=server_tools(a.tools))


def api_keys(api_key: str | None, api_key_file: str | None) -> tuple[str, ...]:
    """llama-server's keys: --api-key split at commas, then --api-key-file's lines that are
    neither empty nor '#' comments.  ValueError naming the flag when the file cannot be read."""
    keys = [k.strip() for k in (api_key or "").split(",") if k.strip()]
    if api_key_file is not None:
        try:
            lines = open(api_key_file, encoding="utf-8").read().splitlines()
        except OSError as e:
            raise ValueError(f"--api-key-file: failed to open file '{api_key_file}': {e.strerror}") from None
        keys += [ln for ln in lines if ln and not ln.startswith("#")]
    return tuple(keys)


def replica_argv(argv: list[str]) -> tuple[str, ...]:
    """The `serve` flags as typed, minus the ones that are the replicated application's (the
    replicas, Ray, the routing, host and port): what each replica runs, for the log."""
    if "serve" in argv:
        argv = argv[argv.index("serve") + 1:]
    own: list[str] = []
    skip = False
    for x in argv:
        if skip:
            skip = False
            continue
        if x.split("=", 1)[0] in SERVE_FLAGS_OWN:
            skip = "=" not in x
            continue
        own.append(x)
    return tuple(own)


def cmd_serve(a: argparse.Namespace) -> int:
    import uvicorn

    from ..server.http import create_app
    from ..server.startup import load_model, server_state, tune_server_process

    quiet = bool(getattr(a, "log_disable", False))  # --log-disable: no log lines at all
    setup_logging(verbose=True)
    if quiet:
        logging.getLogger("llamapy").setLevel(logging.CRITICAL + 1)
    s = serve_settings(a)
    s.check()  # bad -np, --max-queue, --timeout ... fail before anything starts
    if s.replicas.wanted:
        from ..replicas.app import run_replicas

        return run_replicas(s, replica_argv(list(getattr(a, "argv", None) or sys.argv[1:])))
    log = logger("main")
    tune_server_process()
    if any(h not in ("127.0.0.1", "localhost", "::1") for h in host_list(s.host)):
        log.warning(f"listening on {s.host}: anyone who can reach this address can use the server"
                    + ("" if s.api_key else "; set --api-key"))
    state = server_state(s)
    config = uvicorn.Config(create_app(state), host=s.host, port=s.port, log_level=logging.CRITICAL + 1 if quiet else "info" if s.verbose else "warning",
                            access_log=s.verbose and not quiet, timeout_graceful_shutdown=10,
                            http="h11")  # h11 writes header names in the case given (server/header_case.py)
    server = _Server(config, state, s.shutdown_timeout)
    socks = bind_all(s.host, s.port) if len(host_list(s.host)) > 1 else None  # --host A,B: one port, each address
    failed: list[BaseException] = []

    def loader() -> None:
        try:
            load_model(s, state)
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
    server.run(sockets=socks)
    if state.scheduler is not None:
        state.scheduler.stop(join=True, timeout=30)
    if failed:
        print(f"error: {failed[0]}", file=sys.stderr)
        return 1
    log.info(f"server stopped after {time.perf_counter() - t0:.1f} s")
    return 0


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
