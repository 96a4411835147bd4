"""The /engine/events stream: the scheduler thread publishes one EngineView dict per step to
the subscribers (each an asyncio queue of an open SSE response).  Bounded cost: with no
subscriber nothing is built; with some, each step's batch summary (a few small lists), and
at most every MIN_EVERY_S (idle: IDLE_EVERY_S) an event: the KV cells, slots and memory then,
with the batches of the steps since the last event.  It is handed to each subscriber's loop; a subscriber that falls behind loses the
oldest events, never slows the scheduler."""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, AsyncIterator

from .engine_view import EngineView, Scheduler
from .sse import sse

QUEUE_LEN = 32  # events a slow subscriber may lag behind before the oldest are dropped
IDLE_EVERY_S = 0.5  # with nothing decoded, a heartbeat event at most this often
MIN_EVERY_S = 0.05  # at most 20 events a second, each with the batches of every step since the last
MAX_BATCHES = 64  # steps' batches one event carries at most (the newest)


class Subscriber:
    """One open /engine/events response: its loop and queue."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_LEN)

    def offer(self, ev: dict[str, Any]) -> None:
        """Runs in the subscriber's loop: the event, the oldest dropped when full."""
        if self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(ev)


class EngineEvents:
    def __init__(self) -> None:
        self._subs: tuple[Subscriber, ...] = ()  # replaced whole: the scheduler thread reads it unlocked
        self._lock = threading.Lock()
        self.view = EngineView()
        self.last: dict[str, Any] | None = None  # the last event built (a new subscriber's first)
        self._t_last = 0.0
        self._batches: list[dict[str, Any]] = []  # steps since the last event (scheduler thread only)
        # wall seconds spent on subscribers, what they cost the engine (read by tests): in
        # publish (the scheduler thread) and turning events into SSE text (the subscribers'
        # loops, holding the GIL the scheduler's Python needs); one writer thread each
        self.publish_s = 0.0
        self.sse_s = 0.0

    @property
    def subscribed(self) -> bool:
        return bool(self._subs)

    def subscribe(self) -> Subscriber:
        sub = Subscriber()
        with self._lock:
            self._subs = self._subs + (sub,)
        if self.last is not None:
            sub.offer(self.last)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        with self._lock:
            self._subs = tuple(s for s in self._subs if s is not sub)

    def publish(self, sched: Scheduler, infos: list[dict], metrics: dict, decoded: bool) -> None:
        """Called by the scheduler thread at the end of each step (cheap when nobody listens)."""
        subs = self._subs
        if not subs:
            return
        t0 = time.perf_counter()
        try:
            self._publish(subs, sched, infos, metrics, decoded)
        finally:
            self.publish_s += time.perf_counter() - t0

    def _publish(self, subs: tuple[Subscriber, ...], sched: Scheduler, infos: list[dict], metrics: dict,
                 decoded: bool) -> None:
        if decoded:
            self._batches.append(self.view.batch(sched))
            del self._batches[:-MAX_BATCHES]
        now = time.monotonic()
        if now - self._t_last < (MIN_EVERY_S if self._batches else IDLE_EVERY_S):
            return
        self._t_last = now
        ev = self.last = self.view.build(sched, infos, metrics, self._batches)
        self._batches = []
        for s in subs:
            try:
                s.loop.call_soon_threadsafe(s.offer, ev)
            except RuntimeError:  # that loop is closed: the response is gone
                self.unsubscribe(s)

    async def stream(self) -> AsyncIterator[str]:
        """The SSE body of one subscriber, until the client goes away."""
        sub = self.subscribe()
        try:
            while True:
                ev = await sub.queue.get()
                t0 = time.perf_counter()
                text = sse(ev)
                self.sse_s += time.perf_counter() - t0
                yield text
        finally:
            self.unsubscribe(sub)
