"""The asyncio side of a request: submit to the scheduler thread, receive its Events on an
asyncio.Queue (fed through loop.call_soon_threadsafe), cancel when the client goes away."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

from ..chat.apply import ChatOptions
from ..context import Context
from ..grammar import GrammarCompiler
from ..model.model import Model
from .request import Event, Request
from .cors import CorsSettings
from .request_defaults import RequestDefaults
from .scheduler import Scheduler

DISCONNECT_POLL_S = 0.25  # a non-streamed request waiting on its slot checks its client this often


@dataclass(slots=True)
class ServerState:
    """What the routes see.  scheduler is None while the model loads (/health answers 503)."""

    api_key: str | None = None
    api_keys: tuple[str, ...] = ()  # several keys (--api-key a,b, --api-key-file); else api_key alone
    metrics: bool = False
    engine_events: bool = False  # /engine/events (also on with metrics)
    webui: bool = True  # the pages at / and /engine (--no-webui: off)
    slots: bool = False  # /slots (it shows prompts): the CLI turns it on unless --no-slots, as llama-server
    max_body: int = 16 * 1024 * 1024  # bytes; a larger request body is a 413
    timeout: float = 600.0  # seconds a request may take from arrival to its end (--timeout)
    draining: bool = False  # shutting down: new requests get 503
    alias: str = "llamapy"
    aliases: tuple[str, ...] = ()  # --alias a,b,c (sorted); alias is the first
    tags: tuple[str, ...] = ()  # --tags: informational, listed by /v1/models
    embedding: bool = False  # --embedding: the embedding routes answer; completions do not
    pooling: str = "none"  # the pooling that runs (--pooling, else the model's)
    embd_normalize: int = 2  # --embd-normalize: what a request's embd_normalize defaults to
    defaults: RequestDefaults = field(default_factory=RequestDefaults)  # --temp, -n ..: what a request does not set
    chat: ChatOptions = field(default_factory=ChatOptions)  # --jinja, --chat-template*, --reasoning-*
    verbose: bool = False  # -v: completion replies carry __verbose unless the request says "verbose": false
    props: bool = False  # --props: POST /props answers (else 501)
    slot_save_path: Path | None = None  # --slot-save-path: POST /slots/{id}?action=save|restore (None: 501)
    cors: CorsSettings = field(default_factory=CorsSettings)  # --cors-origins, --cors-methods, ..
    ui_mcp_proxy: bool = False  # --ui-mcp-proxy: /cors-proxy forwards (else 403)
    server_tools: tuple[str, ...] = ()  # --tools: the enabled built-in tools' names or "all" (/tools: 403 without)
    model: Model | None = None
    ctx: Context | None = None
    scheduler: Scheduler | None = None
    grammars: GrammarCompiler | None = None  # compiled grammars, cached by their text
    t_created: int = field(default_factory=lambda: int(time.time()))

    @property
    def ready(self) -> bool:
        return self.scheduler is not None

    def attach(self, model: Model, ctx: Context, scheduler: Scheduler) -> None:
        self.grammars = GrammarCompiler(model.tokenizer, model.n_vocab)
        self.model, self.ctx, self.scheduler = model, ctx, scheduler


class Pending:
    """One submitted request.  submit() raises PromptTooLongError / ValueError synchronously,
    before any response byte is sent."""

    def __init__(self, sched: Scheduler, req: Request) -> None:
        self.sched, self.req = sched, req
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.done = False
        loop = asyncio.get_running_loop()

        def sink(ev: Event) -> None:
            try:
                loop.call_soon_threadsafe(self.queue.put_nowait, ev)
            except RuntimeError:  # the event loop is gone (shutdown): nobody is listening
                pass

        req.sink = sink
        sched.submit(req)

    async def events(self, receive: Callable[[], Awaitable[dict]] | None = None) -> AsyncIterator[Event]:
        """Yield events up to and including the final one.  If the consumer stops early (a
        streaming client disconnected) or the ASGI channel `receive` says http.disconnect (a
        non-streamed request's client closed its socket: llama-server cancels the task), the
        request is cancelled, which frees its slot and cells at the scheduler's next step."""
        gone = asyncio.ensure_future(_until_disconnect(receive)) if receive is not None else None
        try:
            while True:
                if gone is None:
                    ev = await self.queue.get()
                else:
                    try:  # the timeout: a request still waiting for a slot notices too
                        ev = await asyncio.wait_for(self.queue.get(), timeout=DISCONNECT_POLL_S)
                    except asyncio.TimeoutError:
                        ev = None
                    if gone.done() and gone.exception() is None:  # (a channel that fails says nothing)
                        return
                    if ev is None:
                        continue
                if ev.final:
                    self.done = True
                yield ev
                if ev.final:
                    return
        finally:
            if gone is not None:
                gone.cancel()
            if not self.done:
                self.sched.cancel(self.req.id)

    def close(self) -> None:
        """The response is over: cancel the request unless it already finished."""
        if not self.done:
            self.done = True
            self.sched.cancel(self.req.id)

    async def collect(self, receive: Callable[[], Awaitable[dict]] | None = None) -> tuple[str, list[Event]]:
        """Whole text and all events (the last one final unless the client left); receive:
        the request's ASGI receive channel, watched for http.disconnect."""
        evs = [ev async for ev in self.events(receive)]
        return "".join(e.text for e in evs), evs


async def _until_disconnect(receive: Callable[[], Awaitable[dict]]) -> None:
    """Returns when the ASGI channel says http.disconnect.  The body is already read, so the
    server (uvicorn, also through Starlette's middleware wrapper) answers only that, once the
    socket closes; Starlette's request.is_disconnected() polls with a cancelled scope, which the
    middleware's wrapper swallows."""
    while (await receive()).get("type") != "http.disconnect":
        pass
