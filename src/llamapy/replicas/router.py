"""Ray Serve request routers for the llamapy replicas (Ray Serve's RequestRouter interface,
alpha in Ray 2.x).  PrefixAffinityRouter sends a request to the replica whose KV cache most
likely holds its longest prompt prefix (affinity.py), unless that replica's queue is longer
than the shortest one by more than `imbalance` requests, in which case the least-loaded
replica takes it; a prompt no replica has seen goes to the least-loaded replica that was
given the fewest prefixes so far, so new conversations spread evenly (and do not pile up on
one replica's slots).  RoundRobinRouter ignores prefixes (the comparison the benchmark
makes).  Neither takes FIFOMixin: a replica chosen for a request must serve that request.
Each router instance lives in the handle of the ingress replica that routes; its table
holds what that ingress routed."""
from __future__ import annotations

import random
from typing import Optional

from ray.serve.request_router import PendingRequest, ReplicaID, ReplicaResult, RequestRouter, RunningReplica

from .affinity import PrefixTable


def _key(r: RunningReplica) -> str:
    return r.replica_id.to_full_id_str()


def _prefix(pending_request: Optional[PendingRequest]) -> list[bytes]:
    """The request's prefix hashes (deployments.ForwardRequest.prefix), [] for other calls."""
    if pending_request is None or not pending_request.args:
        return []
    return getattr(pending_request.args[0], "prefix", None) or []


class PrefixAffinityRouter(RequestRouter):
    def initialize_state(self, imbalance: int = 4) -> None:
        self._table = PrefixTable()
        self._imbalance = imbalance

    async def _queue_lens(self, replicas: list[RunningReplica]) -> dict[str, int]:
        """Ongoing requests per replica: Ray's cached figure, probed where it has none."""
        out, missing = {}, []
        for r in replicas:
            n = self._replica_queue_len_cache.get(r.replica_id)
            if n is None:
                missing.append(r)
            else:
                out[_key(r)] = n
        if missing:
            for r, n in await self._probe_queue_lens(missing, 0):
                if n is not None:
                    out[_key(r)] = n
        return out

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        lens = await self._queue_lens(candidate_replicas)
        load = lambda r: lens.get(_key(r), 0)  # noqa: E731
        # ties: the replica given the fewest prefixes, then at random
        by_load = sorted(random.sample(candidate_replicas, len(candidate_replicas)),
                         key=lambda r: (load(r), self._table.size(_key(r))))
        best, _ = self._table.match(_prefix(pending_request), [_key(r) for r in candidate_replicas])
        if best:
            first = min((r for r in candidate_replicas if _key(r) in best), key=load)
            if load(first) - load(by_load[0]) <= self._imbalance:
                return [[first], [r for r in by_load if r is not first]]
        return [[by_load[0]], by_load[1:]]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: ReplicaResult) -> None:
        hashes = _prefix(pending_request)
        if hashes:
            self._table.record(replica_id.to_full_id_str(), hashes)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self._table.forget(replica_id.to_full_id_str())


class RoundRobinRouter(RequestRouter):
    def initialize_state(self, **_) -> None:
        self._next = 0

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        order = sorted(candidate_replicas, key=_key)
        i = self._next % len(order)
        self._next += 1
        return [[order[i]], order[i + 1:] + order[:i]]
