"""What flows between the HTTP layer and the scheduler: a Request going in, Events coming out.

The scheduler thread never touches asyncio: it calls `Request.sink(event)`, which the HTTP
layer binds to `loop.call_soon_threadsafe(queue.put_nowait, event)`."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..sampling import SamplingParams

if TYPE_CHECKING:
    from ..grammar import Constraint

_ids = itertools.count(1)


def next_request_id() -> int:
    return next(_ids)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_cached: int = 0  # reused from the slot's prompt cache, not decoded again

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class Event:
    """One result for one request.  final=False: a piece of text (maybe empty when held back
    by a partial stop string) for `token`; final=True: the end, with finish_reason in
    stop | length | grammar | timeout | abort | error, and `error` set for all but stop/length
    ("grammar": the request's grammar left no token to sample)."""

    request_id: int
    text: str = ""
    token: int = -1
    probs: list[tuple[int, float]] | None = None  # top n_probs (token, prob), before sampling unless post_sampling_probs
    prob: float = 0.0  # probability of `token`, likewise (set when n_probs > 0)
    final: bool = False
    finish_reason: str = ""
    error: str = ""
    stopping_word: str = ""  # final: the stop string that ended it (llama-server's stopping_word)
    truncated: bool = False  # final: the slot's context ran out (its end, or a context shift dropped tokens)
    usage: Usage | None = None
    timings: dict[str, float] | None = None  # final, or each token's with the request's timings_per_token
    progress: dict[str, float] | None = None  # return_progress: llama-server's prompt_progress after a prompt batch (no token)


@dataclass(slots=True)
class Request:
    """A generation request, already tokenized.  max_tokens < 0: until EOG or the slot's end."""

    prompt: list[int]
    max_tokens: int = 16
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temp=0.8))
    stop: list[str] = field(default_factory=list)
    n_probs: int = 0
    post_sampling_probs: bool = False  # llama-server's: n_probs after the sampler chain (prob, not logprob)
    ignore_eos: bool = False  # llama.cpp's ignore_eos: end-of-generation tokens are never sampled
    logit_bias: tuple[tuple[int, float], ...] = ()  # llama-server's logit_bias: (token, bias) added to the logits
    spec: dict[str, float] = field(default_factory=dict)  # speculative.n_max / n_min / p_min overrides
    constraint: "Constraint | None" = None  # the compiled grammar the output must match
    sink: Callable[[Event], None] = lambda ev: None
    id: int = field(default_factory=next_request_id)
    t_arrival: float = field(default_factory=time.perf_counter)
    timeout: float = 0.0  # seconds from arrival until the request is ended ("timeout"); 0: none
    id_slot: int = -1  # llama-server's id_slot: run on that slot (modulo the slots); -1: the scheduler picks
    n_keep: int | None = None  # context shift: tokens kept at the start (-1: the prompt); None: the server's --keep
    n_discard: int = 0  # context shift: tokens dropped after them; 0: half of the rest
    cache_prompt: bool = True  # llama-server's cache_prompt: False reuses no cached prefix (the whole prompt is decoded)
    n_cache_reuse: int | None = None  # --cache-reuse's chunk size for this request (0: off); None: the server's
    timings_per_token: bool = False  # llama-server's: each token's event carries the timings so far
    return_progress: bool = False  # llama-server's: an event with prompt_progress after each prompt batch
    lora: dict[int, float] | None = None  # llama-server's per-request lora {id: scale} (unlisted: 0); None: the global scales

    def expired(self, now: float) -> bool:
        return self.timeout > 0 and now - self.t_arrival > self.timeout
