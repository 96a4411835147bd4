"""The two Ray Serve deployments of `llamapy serve --replicas N`.

LlamapyReplica is one whole llamapy server (model, context, scheduler and its HTTP app, bound
to 127.0.0.1 inside the replica's process): every route and behaviour of `llamapy serve`,
streaming included, because the request is answered by that same app.  LlamapyIngress is the
application's one HTTP entry: it forwards each request as it came (method, path, headers,
body) through a DeploymentHandle, whose router (router.py) picks the replica, and streams the
answer back.

Failures: the ingress holds the response until the replica's first body bytes arrive; a
replica lost before that (its process killed, its actor gone) is invisible to the client, and
the request goes to another replica, up to RETRIES times.  A replica lost after the client has
bytes ends the stream: an SSE stream with a final `data: {"error": ...}` event, any other body
cut short.  Ray Serve brings a lost replica back."""
from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from ..server.settings import ServeSettings
from .affinity import prefix_hashes, request_text

RETRIES = 3  # other replicas a request may be retried on when its replica is lost before any byte
HOP = {"content-length", "transfer-encoding", "connection", "keep-alive", "date", "server"}


@dataclass(slots=True)
class ForwardRequest:
    method: str
    path: str  # with the query string
    headers: list[tuple[str, str]]
    body: bytes
    prefix: list[bytes] = field(default_factory=list)  # the prompt's prefix hashes, for the router (affinity.py)


@dataclass(slots=True)
class ReplicaStats:
    """What a replica reported with its last response (llamapy's scheduler metrics)."""

    replica: str
    pid: int
    requests_total: int
    requests_processing: int
    requests_deferred: int
    kv_usage: float
    prompt_tokens_cached_total: int
    prompt_tokens_total: int
    t: float = field(default_factory=time.time)


def replica_stats(replica: str, state) -> ReplicaStats:
    _, m = state.scheduler.snapshot()
    return ReplicaStats(replica, os.getpid(), int(m["n_requests_total"]), int(m["n_requests_processing"]),
                        int(m["n_requests_deferred"]),
                        m["kv_cells_used"] / m["kv_cells_total"] if m["kv_cells_total"] else 0.0,
                        int(m["n_prompt_tokens_cached_total"]), int(m["n_prompt_tokens_processed_total"]))


class LlamapyReplica:
    """One llamapy server, started from `llamapy serve`'s typed settings (its host and port
    are its own: 127.0.0.1, any free port)."""

    def __init__(self, settings: ServeSettings) -> None:
        import httpx
        import uvicorn
        from ray import serve

        from ..server.http import create_app
        from ..server.startup import load_model, server_state, tune_server_process

        tune_server_process()
        self.state = server_state(settings)
        load_model(settings, self.state)  # the model's own errors end the replica's start
        self.replica = serve.get_replica_context().replica_id.to_full_id_str()
        config = uvicorn.Config(create_app(self.state), host="127.0.0.1", port=0, log_level="warning",
                                access_log=False)
        self.server = uvicorn.Server(config)
        threading.Thread(target=self.server.run, name="llamapy-replica-http", daemon=True).start()
        while not self.server.started:
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=None)

    async def forward(self, fr: ForwardRequest):
        """The answer of this replica's server: first {status, headers, stats}, then the body's bytes."""
        async with self.client.stream(fr.method, fr.path, headers=fr.headers, content=fr.body) as r:
            yield {"status": r.status_code, "headers": [(k, v) for k, v in r.headers.items() if k.lower() not in HOP],
                   "stats": replica_stats(self.replica, self.state)}
            async for chunk in r.aiter_raw():
                yield chunk

    def stats(self) -> ReplicaStats:
        return replica_stats(self.replica, self.state)

    def check_health(self) -> None:
        """Ray Serve's health check: the scheduler thread and the HTTP server must be alive."""
        t = getattr(self.state.scheduler, "_thread", None)
        if t is not None and not t.is_alive():
            raise RuntimeError("the scheduler thread has stopped")
        if self.server.should_exit:
            raise RuntimeError("the replica's HTTP server has stopped")

    def __del__(self) -> None:
        sched = getattr(getattr(self, "state", None), "scheduler", None)
        if sched is not None:
            sched.stop()


class LlamapyIngress:
    """The application's HTTP entry (app.py makes it a deployment with serve.ingress and one
    catch-all route that calls proxy())."""

    def __init__(self, replicas) -> None:
        self.handle = replicas.options(stream=True)
        self.stats: dict[str, ReplicaStats] = {}
        self.routed: Counter = Counter()
        self.retried = 0
        self.streams_cut = 0

    async def _open(self, fr: ForwardRequest):
        """(head, first body bytes, the rest) from a replica, retried on another replica
        while none was sent; raises the last error when every try failed."""
        from ray.exceptions import RayActorError

        try:
            from ray.exceptions import ActorUnavailableError
        except ImportError:  # older Ray
            ActorUnavailableError = RayActorError
        err: BaseException | None = None
        for attempt in range(RETRIES + 1):
            gen = self.handle.forward.remote(fr)
            try:
                head = await gen.__anext__()
                try:
                    first = await gen.__anext__()
                except StopAsyncIteration:
                    first = b""
                return head, first, gen
            except (RayActorError, ActorUnavailableError) as e:
                err = e
                self.retried += attempt < RETRIES
        raise err  # type: ignore[misc]

    async def proxy(self, request: Request, path: str):
        body = await request.body()
        text = ""
        if body and request.headers.get("content-type", "").startswith("application/json"):
            try:
                parsed = json.loads(body)
                text = request_text(parsed) if isinstance(parsed, dict) else ""
            except ValueError:
                pass
        full = "/" + path + (f"?{request.url.query}" if request.url.query else "")
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP | {"host"}]
        try:
            head, first, gen = await self._open(ForwardRequest(request.method, full, headers, body,
                                                               prefix_hashes(text)))
        except Exception as e:  # noqa: BLE001 - every replica tried was lost
            return JSONResponse({"error": {"message": f"no replica could answer: {type(e).__name__}: {str(e)[:300]}",
                                           "type": "unavailable_error", "code": 503}}, status_code=503)
        st: ReplicaStats = head["stats"]
        self.stats[st.replica] = st
        if path == "metrics" and head["status"] == 200:  # the replica said yes (--metrics, the key): every replica's
            return PlainTextResponse(self.render_metrics(), media_type="text/plain; version=0.0.4")
        self.routed[st.replica] += 1
        sse = any(k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in head["headers"])

        async def rest():
            done = False
            try:
                yield first
                async for chunk in gen:
                    yield chunk
                done = True
            except Exception as e:  # noqa: BLE001 - the replica was lost mid-answer
                done = True
                self.streams_cut += 1
                if sse:
                    msg = {"error": {"message": f"the replica serving this request was lost ({type(e).__name__}); "
                                                "the stream ends here", "type": "server_error", "code": 500}}
                    yield f"data: {json.dumps(msg)}\n\n".encode()
            finally:
                if not done:  # the client went away: the replica's server cancels the request
                    gen.cancel()

        headers = dict(head["headers"]) | {"x-llamapy-replica": st.replica}
        return StreamingResponse(rest(), status_code=head["status"], headers=headers)

    def render_metrics(self) -> str:
        """Per replica (as of its last answer): requests routed here and in total, queue
        length, KV usage, prefix hit tokens; and the ingress's retries and cut streams."""
        rows = ["# TYPE llamapy:ingress_retries_total counter", f"llamapy:ingress_retries_total {self.retried}",
                "# TYPE llamapy:ingress_streams_cut_total counter", f"llamapy:ingress_streams_cut_total {self.streams_cut}"]
        series = [("replica_requests_routed_total", "counter", lambda s: self.routed[s.replica]),
                  ("replica_requests_total", "counter", lambda s: s.requests_total),
                  ("replica_requests_processing", "gauge", lambda s: s.requests_processing),
                  ("replica_queue_length", "gauge", lambda s: s.requests_deferred),
                  ("replica_kv_cache_usage_ratio", "gauge", lambda s: s.kv_usage),
                  ("replica_prompt_tokens_cached_total", "counter", lambda s: s.prompt_tokens_cached_total),
                  ("replica_prompt_tokens_total", "counter", lambda s: s.prompt_tokens_total),
                  ("replica_stats_age_seconds", "gauge", lambda s: round(time.time() - s.t, 3))]
        for name, kind, f in series:
            rows.append(f"# TYPE llamapy:{name} {kind}")
            rows += [f'llamapy:{name}{{replica="{s.replica}",pid="{s.pid}"}} {f(s)}' for s in self.stats.values()]
        return "\n".join(rows) + "\n"
