"""Slot (server_slot): one sequence of the shared Context serving one request at a time.

A slot's seq_id is its index.  `cache_tokens` are the tokens whose K/V sit in the cache for
that seq_id at positions 0..len-1; they survive the request (the prompt cache) until the next
request keeps their longest common prefix, or a cancel removes them."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from ..tokens import common_prefix
from ..sampling import Sampler
from ..tokenizer import StreamDecoder
from .request import Event, Request, Usage
from .stops import StopMatcher
from ..speculative.proposer import Speculator


class SlotState(enum.Enum):
    IDLE = "idle"
    PREFILLING = "prefilling"
    GENERATING = "generating"


class PromptTooLongError(ValueError):
    """A prompt that cannot fit the context of one slot; the message names the numbers
    (llama-server's wording, its exceed_context_size_error with n_prompt_tokens and n_ctx)."""

    def __init__(self, message: str, n_prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(message)
        self.n_prompt_tokens, self.n_ctx = n_prompt_tokens, n_ctx


def check_prompt_fits(n_prompt: int, n_ctx_seq: int, n_ctx: int, n_slots: int, kv_unified: bool) -> None:
    """Raise PromptTooLongError unless a prompt of n_prompt tokens leaves room for at least
    one generated token in a slot of n_ctx_seq cells."""
    if n_prompt == 0:
        raise ValueError("empty prompt: nothing to decode")
    if n_prompt < n_ctx_seq:
        return
    head = f"request ({n_prompt} tokens) exceeds the available context size ({n_ctx_seq} tokens), try increasing it"
    if kv_unified:
        raise PromptTooLongError(
            f"{head}: the unified cache shared by the {n_slots} slots holds {n_ctx_seq} (-c {n_ctx}); use a larger -c",
            n_prompt, n_ctx_seq)
    raise PromptTooLongError(
        f"{head}: each of the {n_slots} slots holds {n_ctx_seq} (-c {n_ctx} / -np {n_slots}); "
        f"use --kv-unified or a larger -c", n_prompt, n_ctx_seq)


@dataclass(slots=True)
class Slot:
    id: int  # = seq_id
    n_ctx: int  # cells this slot may use (n_ctx_seq)
    state: SlotState = SlotState.IDLE
    request: Request | None = None
    cache_tokens: list[int] = field(default_factory=list)  # in the KV cache at pos 0..len-1
    lora: tuple[float, ...] | None = None  # the LoRA scales its cells were computed with (server/lora_scales.py)
    n_past: int = 0  # prompt tokens in the cache (prefill progress)
    n_cached: int = 0  # prompt tokens reused from the previous request
    sampled: int = -1  # last sampled token, not yet decoded
    n_decoded: int = 0  # tokens generated for the current request
    i_batch: int = -1  # row of this slot's output in the current batch, -1: none
    sampler: Sampler | None = None
    decoder: StreamDecoder | None = None
    stops: StopMatcher | None = None
    t_start: float = 0.0
    t_prompt_done: float = 0.0
    t_last: float = 0.0  # when the slot was last used (LRU choice)
    draft: list[int] = field(default_factory=list)  # this step's draft, in the batch after `sampled`
    spec: Speculator | None = None  # the current request's drafting (set by the scheduler), and its counts
    truncated: bool = False  # the request met the slot's end (stopped there, or a context shift dropped tokens)

    @property
    def is_idle(self) -> bool:
        return self.state is SlotState.IDLE

    def start(self, req: Request, sampler: Sampler, decoder: StreamDecoder) -> int:
        """Take a request; returns how many prompt tokens are reused from the cache (the longest
        common prefix, less one so the last prompt token is decoded for fresh logits; none when
        the request says cache_prompt: false).  The caller removes the cache tail from that
        position on."""
        n_keep = min(common_prefix(self.cache_tokens, req.prompt), len(req.prompt) - 1) if req.cache_prompt else 0
        self.cache_tokens = self.cache_tokens[:n_keep]
        self.request, self.state = req, SlotState.PREFILLING
        self.n_past = self.n_cached = n_keep
        self.sampled, self.n_decoded, self.i_batch = -1, 0, -1
        self.draft, self.spec, self.truncated = [], None, False
        self.sampler, self.decoder, self.stops = sampler, decoder, StopMatcher(list(req.stop))
        self.t_start = time.perf_counter()
        return n_keep

    def n_gen_steps(self) -> int:
        """llama-server's n_gen_steps: decode steps spent on generation (the first token is free)."""
        return max(0, self.n_decoded - 1)

    def final_event(self, reason: str, error: str = "") -> Event:
        """The request's last event: held-back text, usage and llama-server's timings."""
        req = self.request
        tail = "" if self.stops is None or self.stops.matched else self.stops.push(self.decoder.flush()) + self.stops.flush()
        timings = self.timings()
        if self.spec is not None:  # llama-server's names
            timings["draft_n"], timings["draft_n_accepted"] = self.spec.n_drafted, self.spec.n_accepted
        usage = Usage(len(req.prompt), self.n_decoded, self.n_cached)
        word = self.stops.matched if self.stops is not None else ""
        return Event(req.id, text=tail, final=True, finish_reason=reason, error=error, stopping_word=word,
                     truncated=self.truncated, usage=usage, timings=timings)

    def progress(self) -> dict[str, float]:
        """llama-server's prompt_progress: the prompt's tokens, those from the cache, those in the
        slot so far, and the whole milliseconds since the slot took the request (an integer there)."""
        return {"total": len(self.request.prompt), "cache": self.n_cached, "processed": len(self.cache_tokens),
                "time_ms": int((time.perf_counter() - self.t_start) * 1000)}

    def progress_event(self) -> Event:
        """return_progress's event: prompt_progress, and the timings with timings_per_token."""
        req = self.request
        return Event(req.id, progress=self.progress(), timings=self.timings() if req.timings_per_token else None)

    def timings(self) -> dict[str, float]:
        """llama-server's timings of the request so far (while the prompt is read: the prompt
        tokens decoded so far, and 0 ms before the first batch)."""
        req = self.request
        now = time.perf_counter()
        if self.t_prompt_done:
            n_prompt_new, t_p = len(req.prompt) - self.n_cached, self.t_prompt_done - self.t_start
        else:
            n_prompt_new = self.n_past - self.n_cached
            t_p = now - self.t_start if n_prompt_new > 0 else 0.0
        t_g = now - self.t_prompt_done if self.t_prompt_done else 0.0
        return {
            "prompt_n": n_prompt_new, "prompt_ms": t_p * 1000, "predicted_n": self.n_decoded, "predicted_ms": t_g * 1000,
            "cache_n": self.n_cached, "queue_ms": (self.t_start - req.t_arrival) * 1000,
            "prompt_per_token_ms": t_p * 1000 / n_prompt_new if n_prompt_new > 0 else 0.0,
            "prompt_per_second": n_prompt_new / t_p if t_p > 0 else 0.0,
            # llama-server's rates are over the decode steps: the first token comes from the prompt's logits
            "predicted_per_token_ms": t_g * 1000 / self.n_gen_steps() if self.n_gen_steps() > 0 else 0.0,
            "predicted_per_second": self.n_gen_steps() / t_g if t_g > 0 else 0.0,
        }

    def release(self) -> None:
        """Back to idle; cache_tokens stay (prompt cache)."""
        self.state, self.request, self.i_batch, self.t_prompt_done = SlotState.IDLE, None, -1, 0.0
        self.sampler = self.decoder = self.stops = None
        self.t_last = time.perf_counter()

    def info(self) -> dict:
        """The /slots view."""
        req = self.request
        return {
            "id": self.id,
            "state": self.state.value,
            "is_processing": not self.is_idle,
            "n_ctx": self.n_ctx,
            "id_task": req.id if req else -1,
            "n_tokens_cached": len(self.cache_tokens),
            "n_prompt_tokens": len(req.prompt) if req else 0,
            "n_prompt_tokens_processed": self.n_past if req else 0,
            "n_prompt_tokens_cached": self.n_cached if req else 0,
            "prompt_progress": (self.n_past / len(req.prompt)) if req else 0.0,
            "n_decoded": self.n_decoded,
        }
