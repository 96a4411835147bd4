"""llama.cpp's default sampler chain on torch tensors.

    penalties -> top_k -> top_p -> min_p -> temperature -> dist

(common/sampling.cpp, with DRY, top-n-sigma, typical-p and XTC at their disabled
defaults.) Each stage is a function over a `TokenDataArray` (llama_token_data_array):
candidate ids and their logits, possibly sorted by logit. Like llama.cpp, top_p and
min_p look at the probabilities *before* temperature. temp <= 0 is greedy: the argmax
of the penalized logits, which is what the chain reduces to when the temperature
sampler keeps only the largest logit.
"""

from __future__ import annotations

import math
import os
import sys
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .kernels.ops import argmax, topk
from .mt19937 import MT19937

if TYPE_CHECKING:
    from .grammar import Constraint

LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # "pick a random seed"
TOP_P_PARTIAL_SORT = 256  # llama.cpp's top_p first sorts only this many when n > 1024


@dataclass(slots=True)
class SamplingParams:
    """common_params_sampling's defaults (llama.cpp common/common.h)."""

    seed: int = LLAMA_DEFAULT_SEED  # LLAMA_DEFAULT_SEED = random
    n_probs: int = 0  # > 0: top_probs() reports this many (token, prob) pairs
    min_keep: int = 0  # top_p / min_p keep at least this many candidates
    top_k: int = 40  # <= 0: disabled
    top_p: float = 0.95  # 1.0: disabled
    min_p: float = 0.05  # 0.0: disabled
    temp: float = 0.80  # <= 0: greedy
    penalty_last_n: int = 64  # 0: disabled, -1: context size
    penalty_repeat: float = 1.0  # 1.0: disabled
    penalty_freq: float = 0.0  # 0.0: disabled
    penalty_present: float = 0.0  # 0.0: disabled

    def __post_init__(self) -> None:
        if not 0 <= self.seed <= 0xFFFFFFFF:
            raise ValueError(f"seed ({self.seed}) must be in [0, 2^32-1]; 4294967295 = random")
        if self.penalty_last_n < -1:
            raise ValueError(
                f"penalty_last_n ({self.penalty_last_n}) must be >= -1 (0 = off, -1 = n_ctx)"
            )
        if self.min_keep < 0 or self.n_probs < 0:
            raise ValueError(
                f"min_keep ({self.min_keep}) and n_probs ({self.n_probs}) must be >= 0"
            )

    def penalties_enabled(self) -> bool:
        return self.penalty_last_n != 0 and not (
            self.penalty_repeat == 1.0 and self.penalty_freq == 0.0 and self.penalty_present == 0.0
        )


@dataclass(slots=True)
class TokenDataArray:
    """Candidates: ids [n_cand] int64 and logits [n_cand] float32, same device.

    `sorted`: logits descending. `probs` [n_cand] is set by dist(); `selected` indexes ids.
    """

    ids: torch.Tensor
    logits: torch.Tensor
    sorted: bool = False
    probs: torch.Tensor | None = None
    selected: int = -1

    def take(self, idx: torch.Tensor | slice, now_sorted: bool) -> None:
        self.ids, self.logits, self.sorted = self.ids[idx], self.logits[idx], now_sorted


def apply_penalties(
    logits: torch.Tensor, counts: Counter[int], repeat: float, freq: float, present: float
) -> None:
    """In place on the full vocabulary, logits [n_vocab]: for each token seen `count` times
    in the window, divide a positive logit by `repeat` (multiply one <= 0), then subtract
    count*freq + present."""
    if not counts:
        return
    n_vocab = logits.shape[0]
    for bad in (min(counts), max(counts)):
        if not 0 <= bad < n_vocab:
            raise ValueError(f"accepted token {bad} is outside the vocabulary (n_vocab {n_vocab})")
    tok = torch.tensor(list(counts.keys()), dtype=torch.int64, device=logits.device)
    cnt = torch.tensor(list(counts.values()), dtype=torch.float32, device=logits.device)
    l = logits[tok]  # [n_seen]
    pen = torch.where(l <= 0, l * repeat, l / repeat) - cnt * freq - present  # every token in `counts` has count > 0
    # a masked logit (-inf: a grammar's) stays masked whatever the penalties (a repeat penalty
    # that rounds to 0 in float32 would make it NaN, and a NaN maximum empties min_p)
    logits[tok] = torch.where(torch.isneginf(l), l, pen)


def top_k(cur: TokenDataArray, k: int) -> None:
    """Keep the k largest logits, sorted. k <= 0: no-op."""
    if k <= 0:
        return
    k = min(k, cur.ids.shape[0])
    vals, idx = torch.topk(cur.logits, k)
    cur.ids, cur.logits, cur.sorted = cur.ids[idx], vals, True


def top_p(cur: TokenDataArray, p: float, min_keep: int = 0) -> None:
    """Keep the smallest prefix (by probability, descending) whose cumulative probability
    reaches p, and at least min_keep tokens. p >= 1: no-op. Leaves candidates sorted."""
    if p >= 1.0:
        return
    n = cur.ids.shape[0]
    probs = torch.softmax(cur.logits, dim=0)  # [n], over all current candidates
    if cur.sorted:
        order = None
        top = probs
    else:  # like llama.cpp: try the top 256 first, sort everything only if they fall short
        k = min(TOP_P_PARTIAL_SORT, n) if n > 1024 else n
        top, order = torch.topk(probs, k)
        if k < n and top.sum().item() < p:
            top, order = torch.sort(probs, descending=True)
    cum = torch.cumsum(top, dim=0)  # [k]
    reached = cum >= p
    if min_keep > 1:
        reached[: min_keep - 1] = False
    last = int(torch.argmax(reached.to(torch.int8)).item()) + 1 if bool(reached.any()) else n
    if order is None:
        cur.take(slice(0, last), True)
    else:
        cur.take(order[:last], True)


def min_p(cur: TokenDataArray, p: float, min_keep: int = 0) -> None:
    """Keep tokens with prob >= p * max prob (logit >= max + ln p), at least min_keep.
    p <= 0: no-op. Keeps the order it was given."""
    n = cur.ids.shape[0]
    if p <= 0.0 or n == 0:
        return
    min_logit = cur.logits.max() + math.log(p)
    keep = cur.logits >= min_logit  # [n] bool
    n_keep = int(keep.sum().item())
    if n_keep >= max(min_keep, 1):
        cur.take(keep.nonzero().squeeze(1), cur.sorted)
        return
    if not cur.sorted:
        vals, idx = torch.sort(cur.logits, descending=True)
        cur.ids, cur.logits, cur.sorted = cur.ids[idx], vals, True
    cur.take(slice(0, min(max(min_keep, 1), n)), True)  # never none (llama.cpp keeps the first)


def temperature(cur: TokenDataArray, temp: float) -> None:
    """Divide logits by temp; temp <= 0 keeps only the (first) largest logit."""
    if temp <= 0.0:
        i = int(torch.argmax(cur.logits).item())
        cur.take(slice(i, i + 1), True)
        return
    cur.logits = cur.logits / temp


def dist(cur: TokenDataArray, rng: MT19937) -> int:
    """Draw one candidate from softmax(logits) as llama.cpp's dist sampler: one uniform
    draw from `rng` (drawn even for a single candidate), the first candidate, in the
    chain's order, whose running float64 sum of float32 exp(logit - max) reaches the draw
    times the total. Sets cur.probs and cur.selected; returns the token id."""
    u = rng.uniform()
    e = torch.exp(cur.logits - cur.logits.max())  # [n] float32
    cum = torch.cumsum(e.to(torch.float64), dim=0)  # [n]
    target = cum[-1:] * u  # [1]
    i = min(int(torch.searchsorted(cum, target).item()), cum.shape[0] - 1)
    cur.probs = e / e.sum()
    cur.selected = i
    return int(cur.ids[i].item())


def token_probabilities(logits: torch.Tensor, n_top: int) -> list[tuple[int, float]]:
    """softmax over the raw logits [n_vocab], top n_top (token, prob) pairs, largest first
    (the server's pre-sampling probabilities)."""
    probs = torch.softmax(logits.to(torch.float32), dim=0)
    vals, idx = torch.topk(probs, min(n_top, probs.shape[0]))
    return list(zip(idx.tolist(), vals.tolist()))


class Sampler:
    """One sequence's sampler chain with its penalty window and its RNG.

    sample(logits) picks a token but does not record it: call accept(token) for every
    token that enters the sequence (prompt tokens too, if they should be penalized).
    """

    def __init__(self, params: SamplingParams | None = None, n_ctx: int | None = None,
                 grammar: "Constraint | None" = None) -> None:
        self.params = params if params is not None else SamplingParams()
        self.grammar = grammar  # masks the logits before the chain; advanced by accept(t, accept_grammar=True)
        last_n = self.params.penalty_last_n
        window = n_ctx if last_n == -1 else last_n
        if n_ctx is not None and window is not None:  # a sequence never holds more than its context:
            window = min(window, n_ctx)  # a larger repeat_last_n means the same window
        self._window: deque[int] = deque(maxlen=None if window is None else min(window, sys.maxsize))
        self._counts: Counter[int] = Counter()
        self._rng = MT19937()
        self.seed = 0
        self.cur: TokenDataArray | None = None  # candidates after the last sample()
        self.reset()

    def reset(self) -> None:
        """Clear the penalty window and re-seed (a fresh random seed if seed is the default)."""
        self._window.clear()
        self._counts.clear()
        s = self.params.seed
        self.seed = int.from_bytes(os.urandom(4), "little") if s == LLAMA_DEFAULT_SEED else s
        self._rng.seed(self.seed)
        self.cur = None

    def accept(self, token: int, accept_grammar: bool = False) -> None:
        """Add token to the penalty window (the last penalty_last_n accepted tokens); with
        accept_grammar (a generated token, as llama.cpp's common_sampler_accept) the grammar
        consumes it too."""
        if accept_grammar and self.grammar is not None:
            self.grammar.advance(token)
        if self.params.penalty_last_n == 0:
            return
        if self._window.maxlen is not None and len(self._window) == self._window.maxlen:
            old = self._window[0]
            self._counts[old] -= 1
            if self._counts[old] == 0:
                del self._counts[old]
        self._window.append(token)
        self._counts[token] += 1

    def sample(self, logits: torch.Tensor) -> int:
        """logits [n_vocab] (any float dtype, any device; not modified) -> token id.  With a
        grammar, disallowed tokens are masked first (GrammarDeadEnd when none is left)."""
        if logits.dim() != 1 or logits.shape[0] == 0:
            raise ValueError(
                f"sample() takes one row of logits [n_vocab], got {tuple(logits.shape)}"
            )
        if self.grammar is not None:
            logits = self.grammar.apply(logits)
        p = self.params
        if p.temp <= 0.0 and not p.penalties_enabled():  # greedy: the chain would keep only the argmax
            x = logits.detach()
            i = argmax(x)  # the first largest, as temperature(cur, 0.0)
            self.cur = TokenDataArray(torch.tensor([i], device=x.device), x[i : i + 1].float(), True,
                                      torch.ones(1, device=x.device), 0)
            return i
        cur = self._chain(logits)
        if p.temp <= 0.0:
            cur.probs, cur.selected = torch.ones(1, device=cur.logits.device), 0
            self.cur = cur
            return int(cur.ids[0].item())
        self.cur = cur
        return dist(cur, self._rng)

    def _chain(self, logits: torch.Tensor) -> TokenDataArray:
        """The candidates the chain leaves for logits [n_vocab]: penalties, then the argmax
        (temp <= 0) or top_k, top_p, min_p and temperature."""
        p = self.params
        x = logits.detach()  # [n_vocab]
        if p.penalties_enabled():
            x = x.to(dtype=torch.float32, copy=True)
            apply_penalties(x, self._counts, p.penalty_repeat, p.penalty_freq, p.penalty_present)
        fast = topk(x, p.top_k) if p.temp > 0.0 and 0 < p.top_k < x.shape[0] else None
        if fast is not None:  # the k largest straight from the row: no copy, no arange, no torch.topk
            cur = TokenDataArray(fast[0], fast[1], True)  # (the kernels take CPU rows only)
        else:
            cur = TokenDataArray(torch.arange(x.shape[0], device=x.device), x.to(dtype=torch.float32, copy=True))
        if p.temp <= 0.0:
            temperature(cur, 0.0)
            return cur
        if fast is None:
            top_k(cur, p.top_k)
        top_p(cur, p.top_p, p.min_keep)
        min_p(cur, p.min_p, p.min_keep)
        temperature(cur, p.temp)
        return cur

    def verify(self, logits: torch.Tensor, draft: int) -> tuple[int, bool]:
        """Speculative verification of one drafted token against the target's logits [n_vocab]
        at its position: (token, accepted).  Drafts here are deterministic (an n-gram lookup,
        a draft model's argmax), so the draft distribution q is one-hot and rejection sampling
        reduces to: accept with probability p(draft), else draw from p with the draft removed,
        renormalized -- which makes the token's distribution exactly p, the distribution
        sample() draws from.  Greedy: the argmax, accepted when it is the draft.  Like
        sample(), it records nothing: accept() the token.  With a grammar, the masked
        distribution is the target (drafts are trimmed to what the grammar accepts)."""
        if self.params.temp <= 0.0:
            t = self.sample(logits)
            return t, t == draft
        if self.grammar is not None:
            logits = self.grammar.apply(logits)
        cur = self._chain(logits)
        probs = torch.softmax(cur.logits, dim=0).to(torch.float64)  # [n_cand]
        hit = (cur.ids == draft).nonzero()
        p_d = float(probs[hit[0, 0]]) if hit.numel() else 0.0
        u = self._rng.uniform()
        if u < p_d or p_d >= 1.0:  # (p_d == 1: nothing else to draw)
            cur.probs, cur.selected = probs.float(), int(hit[0, 0])
            self.cur = cur
            return draft, True
        chain = probs.float()  # what top_probs() reports: the chain's distribution, not the residual drawn from
        if hit.numel():
            probs[hit[0, 0]] = 0.0
        cum = torch.cumsum(probs, dim=0)  # [n_cand]
        v = self._rng.uniform() * float(cum[-1])
        i = min(int(torch.searchsorted(cum, torch.tensor([v], dtype=torch.float64)).item()), cum.shape[0] - 1)
        while probs[i] == 0.0 and i + 1 < cum.shape[0]:  # searchsorted may land on the removed draft's zero
            i += 1
        cur.probs, cur.selected = chain, i
        self.cur = cur
        return int(cur.ids[i].item()), False

    def top_probs(self, n: int | None = None) -> list[tuple[int, float]]:
        """The n (default params.n_probs) most probable (token, prob) pairs after the chain
        of the last sample() or verify(), largest first; fewer if fewer candidates survived."""
        n = self.params.n_probs if n is None else n
        if self.cur is None or self.cur.probs is None:
            raise RuntimeError("top_probs() needs a sample() first")
        vals, idx = torch.topk(self.cur.probs, min(n, self.cur.probs.shape[0]))
        return list(zip(self.cur.ids[idx].tolist(), vals.tolist()))

    def post_sampling_probs(self, token: int, n: int) -> tuple[float, list[tuple[int, float]]]:
        """llama-server's post_sampling_probs for the token the last sample() / verify() gave:
        its probability among the chain's candidates (0 if it was not one) and the n most
        probable candidates with a probability above 0."""
        top = [(t, p) for t, p in self.top_probs(n) if p > 0.0]
        hit = (self.cur.ids == token).nonzero()
        return (float(self.cur.probs[hit[0, 0]]) if hit.numel() else 0.0), top
