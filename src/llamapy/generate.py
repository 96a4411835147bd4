"""A single-sequence generation loop over Context.decode(): prompt in n_batch chunks, then one
token per decode, sampled by a Sampler, stopping at end-of-generation or n_predict."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

from .batch import Batch
from .context import Context
from .sampling import Sampler


@dataclass(slots=True)
class GenTimings:
    n_prompt: int = 0
    t_prompt: float = 0.0
    n_gen: int = 0
    t_gen: float = 0.0
    stop: str = ""
    tokens: list[int] = field(default_factory=list)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (the reusable cached part)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def prefill(ctx: Context, ids: list[int], seq_id: int = 0) -> None:
    """Decode a prompt in n_batch-sized calls, logits for its last token only."""
    if not ids:
        raise ValueError("empty prompt: nothing to decode (add text or BOS)")
    n_batch = ctx.cparams.n_batch
    pos0 = ctx.memory.seq_pos_max(seq_id) + 1
    for i in range(0, len(ids), n_batch):
        b = Batch()
        chunk = ids[i : i + n_batch]
        for j, t in enumerate(chunk):
            b.add(t, pos0 + i + j, (seq_id,), logits=(i + j == len(ids) - 1))
        ctx.decode(b)


def generate(ctx: Context, sampler: Sampler, prompt: list[int], n_predict: int, seq_id: int = 0,
             timings: GenTimings | None = None) -> Iterator[int]:
    """Yield sampled tokens; n_predict < 0 means until end-of-generation or the context is full."""
    tm = timings if timings is not None else GenTimings()
    tok = ctx.model.tokenizer
    t0 = time.perf_counter()
    prefill(ctx, prompt, seq_id)
    tm.n_prompt, tm.t_prompt = len(prompt), time.perf_counter() - t0
    for t in prompt:  # llama-cli pushes prompt tokens into the penalty window too
        sampler.accept(t)
    n_ctx_seq = ctx.n_ctx_seq
    t0 = time.perf_counter()
    n = 0
    while n_predict < 0 or n < n_predict:
        token = sampler.sample(ctx.get_logits_ith(-1))
        sampler.accept(token)
        if tok.is_eog(token):
            tm.stop = "eog"
            break
        tm.tokens.append(token)
        n += 1
        tm.n_gen, tm.t_gen = n, time.perf_counter() - t0
        yield token
        pos = ctx.memory.seq_pos_max(seq_id) + 1
        if pos >= n_ctx_seq:
            tm.stop = "context"
            break
        b = Batch()
        b.add(token, pos, (seq_id,), logits=True)
        ctx.decode(b)
    else:
        tm.stop = "length"
    tm.t_gen = time.perf_counter() - t0

