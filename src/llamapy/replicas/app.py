"""The Ray Serve application of `llamapy serve --replicas N`, and running it.

    llamapy serve -m MODEL --replicas 2 -np 4 -t 1            # a local Ray on 127.0.0.1, or RAY_ADDRESS's
    llamapy serve -m MODEL --min-replicas 1 --max-replicas 4   # autoscaled on ongoing requests
    serve run llamapy.cli.replicas:app_builder args="-m MODEL -np 4" replicas=2   # Ray's own CLI

Every `llamapy serve` flag applies per replica: each replica starts from the same typed
ServeSettings (server/settings.py), which the command line built once; nothing here reads
argv.  A replica takes -t CPUs (1 when unset) from Ray; the ingress none."""
# no `from __future__ import annotations` here: Ray pickles the ingress class by value, and FastAPI
# must see its route's annotations as objects, not as names to look up

import signal
import sys
import threading
from dataclasses import dataclass

from fastapi import Request  # at module level: FastAPI reads the route's annotations from here

from ..log import logger
from ..server.settings import AUTO_SLOTS, ServeSettings


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    serve: ServeSettings  # each replica's server (its host and port are its own: 127.0.0.1, any port)
    serve_argv: tuple[str, ...] = ()  # the `llamapy serve` flags as typed, for the log
    replicas: int = 1
    min_replicas: int | None = None  # autoscaling when set (with max_replicas)
    max_replicas: int | None = None
    routing: str = "affinity"  # or "round-robin"
    n_parallel: int = 4  # slots per replica: the autoscaler's target of ongoing requests
    max_queue: int = 16  # requests a replica may hold beyond its slots
    threads: int = 1  # CPUs a replica asks Ray for
    timeout_s: float = 600.0  # a request's longest time: how long a scaled-down replica may finish

    def check(self) -> None:
        if self.routing not in ("affinity", "round-robin"):
            raise ValueError(f"--routing {self.routing!r}: expected affinity or round-robin")
        if self.replicas < 1:
            raise ValueError(f"--replicas ({self.replicas}) must be >= 1")
        if (self.min_replicas is None) != (self.max_replicas is None):
            raise ValueError("--min-replicas and --max-replicas go together")
        if self.min_replicas is not None and not 0 < self.min_replicas <= self.max_replicas:
            raise ValueError(f"--min-replicas ({self.min_replicas}) must be >= 1 and <= --max-replicas ({self.max_replicas})")


def build_app(plan: ReplicaPlan):
    """The bound application: an ingress in front of the llamapy replicas."""
    from fastapi import FastAPI
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from .deployments import LlamapyIngress, LlamapyReplica
    from .router import PrefixAffinityRouter, RoundRobinRouter

    plan.check()
    router = RequestRouterConfig(
        request_router_class=PrefixAffinityRouter if plan.routing == "affinity" else RoundRobinRouter,
        request_router_kwargs={"imbalance": max(2, plan.n_parallel)} if plan.routing == "affinity" else {})
    opts = dict(ray_actor_options={"num_cpus": plan.threads}, max_ongoing_requests=plan.n_parallel + plan.max_queue,
                request_router_config=router, graceful_shutdown_timeout_s=plan.timeout_s,
                health_check_period_s=5, health_check_timeout_s=30)
    if plan.min_replicas is not None:
        opts["autoscaling_config"] = {"min_replicas": plan.min_replicas, "max_replicas": plan.max_replicas,
                                      "target_ongoing_requests": plan.n_parallel}
    else:
        opts["num_replicas"] = plan.replicas
    replica = serve.deployment(LlamapyReplica, name="llamapy-replica", **opts)
    app = FastAPI(title="llamapy replicas")

    @serve.deployment(name="llamapy-ingress", num_replicas=1, ray_actor_options={"num_cpus": 0},
                      max_ongoing_requests=100_000)
    @serve.ingress(app)
    class Ingress(LlamapyIngress):
        @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
        async def route(self, request: Request, path: str):
            return await self.proxy(request, path)

    return Ingress.bind(replica.bind(plan.serve))


def plan_from_settings(s: ServeSettings, serve_argv: tuple[str, ...] = ()) -> ReplicaPlan:
    """The plan of `llamapy serve ... --replicas N` from its settings; serve_argv: the flags
    each replica runs with, as typed (the log names them)."""
    r = s.replicas
    n_par = s.n_parallel or AUTO_SLOTS
    return ReplicaPlan(s, tuple(serve_argv), r.replicas or 1, r.min_replicas, r.max_replicas, r.routing, n_par,
                       s.max_queue if s.max_queue is not None else 4 * n_par,
                       s.ctx.n_threads if s.ctx.n_threads > 0 else 1, s.timeout)


def check_model(s: ServeSettings) -> None:
    """What a replica would fail on, checked here first so that the start-up fails with the
    model's own message: the file and its header, and the memory the context needs."""
    from dataclasses import replace

    from ..memory.estimate import model_info
    from ..memory.fit import default_budget, fit_ctx

    info = model_info(s.model)  # a bad path or file: GGUFError / FileNotFoundError with its message
    p = replace(s.ctx, n_seq_max=s.n_parallel or AUTO_SLOTS)
    budget = int(s.ctx.mem_budget_mib * 1024 * 1024) if s.ctx.mem_budget_mib else default_budget("cpu")
    fit_ctx(info, p, budget)  # MemoryBudgetError names the numbers


def run_replicas(s: ServeSettings, serve_argv: tuple[str, ...] = ()) -> int:
    """Start (or join) Ray, deploy the application on s.host:s.port, print the ready line,
    wait for SIGTERM / SIGINT, then shut the application down (replicas finish first).
    serve_argv: the replicas' flags as typed, for the log."""
    import os

    try:
        import ray
        from ray import serve
    except ImportError:
        raise ValueError("--replicas runs on Ray Serve, which is not installed: pip install 'llamapy[replicas]' "
                         "(ray[serve])") from None

    log = logger("srv")
    plan = plan_from_settings(s, serve_argv)
    plan.check()
    check_model(s)
    address = s.replicas.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level="WARNING")
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING",
                 _node_ip_address="127.0.0.1")
    port = s.port
    if port == 0:
        from ..pipeline.env import free_port

        port = free_port()
    serve.start(http_options={"host": s.host, "port": port}, logging_config={"log_level": "WARNING"})
    try:
        serve.run(build_app(plan), name="llamapy", route_prefix="/", blocking=False)
    except Exception as e:  # noqa: BLE001 - a replica's constructor failed: its last line, not the stack
        print(f"error: the replicas did not start: {_last_line(e)}", file=sys.stderr)
        serve.shutdown()
        ray.shutdown()
        return 1
    scale = (f"autoscaled {plan.min_replicas}..{plan.max_replicas}" if plan.min_replicas is not None
             else f"{plan.replicas} replica(s)")
    log.info(f"llamapy on Ray Serve: {scale}, routing {plan.routing}, each: llamapy serve {' '.join(plan.serve_argv)}")
    print(f"ready: http://{s.host}:{port}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("shutting down the replicas (in-flight requests finish first)")
    serve.shutdown()
    ray.shutdown()
    return 0


def _last_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    errs = [ln for ln in lines if "Error:" in ln or "error:" in ln]
    return (errs or lines or [type(e).__name__])[-1][:500]
