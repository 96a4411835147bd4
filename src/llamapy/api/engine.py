"""The in-process server behind `llamapy.Llama`: one model, one context, the server's own
Scheduler with one slot, driven from the caller's thread (no scheduler thread, no HTTP).

A request goes through exactly the code `llamapy serve` runs (server/scheduler.py's
update_slots: prompt cache, batching, sampling, grammar, stop strings, streaming); run()
steps the scheduler until the request's final Event."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..grammar import Constraint, GrammarCompiler, GrammarSpec
from ..model.model import Model
from ..params import ContextParams
from ..pipeline.open import open_context
from ..server.request import Event, Request
from ..server.scheduler import Scheduler
from ..server.slots import Slot
from ..speculative.proposer import SpecParams


class GenerationError(RuntimeError):
    """A request the scheduler ended with an error (grammar dead end, full cache, abort)."""


@dataclass(slots=True)
class Engine:
    """model + ctx + a one-slot Scheduler; `slot` is slot 0, whose cache_tokens are the
    tokens whose K/V the context holds (llama-cpp-python's input_ids)."""

    model: Model
    ctx: object
    scheduler: Scheduler
    grammars: GrammarCompiler

    @classmethod
    def open(cls, model_ref: str, params: ContextParams, spec: SpecParams | None = None,
             mmap: bool | None = None) -> "Engine":
        model, ctx = open_context(model_ref, params, device=params.device, mmap=mmap)
        proposers = None
        if spec is not None and spec.type != "none":
            from ..speculative.proposer import make_proposers

            proposers = make_proposers(spec, model, params, 1)
        sched = Scheduler(ctx, spec, proposers)
        return cls(model, ctx, sched, GrammarCompiler(model.tokenizer, model.n_vocab))

    @property
    def slot(self) -> Slot:
        return self.scheduler.slots[0]

    def constraint(self, spec: GrammarSpec | None) -> Constraint | None:
        return None if spec is None else self.grammars.constraint(spec)

    def run(self, req: Request) -> Iterator[Event]:
        """Yield the request's Events up to and including the final one.  Closing the
        iterator early cancels the request (its cells are dropped, as the server does)."""
        got: list[Event] = []
        req.sink = got.append
        self.scheduler.submit(req)  # PromptTooLongError / ValueError here, before any step
        done = False
        try:
            while not done:
                self.scheduler.update_slots()
                while got:
                    ev = got.pop(0)
                    done = done or ev.final
                    yield ev
        finally:
            if not done:
                self.scheduler.cancel(req.id)
                self.scheduler.update_slots()

    def reset(self) -> None:
        """Forget the cached tokens and their cells."""
        self.ctx.memory.seq_rm(0, -1, -1)
        self.slot.cache_tokens = []
