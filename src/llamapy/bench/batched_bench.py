"""llama-batched-bench: for each (pp, tg, pl), prefill pl prompts of pp tokens (or one shared
prompt copied with seq_cp under -pps), then tg decode steps that carry one token for each of the
pl sequences, and report the time and speed of each phase (tools/batched-bench)."""
from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass
from typing import Iterator

from ..batch import Batch
from ..context import Context


@dataclass(frozen=True, slots=True)
class BatchedRow:
    """One table row; keys as llama-batched-bench's jsonl."""

    pp: int
    tg: int
    pl: int
    n_kv: int
    t_pp: float
    speed_pp: float
    t_tg: float
    speed_tg: float
    t: float
    speed: float


def n_ctx_required(pp: int, tg: int, pl: int, is_pp_shared: bool, kv_unified: bool) -> int:
    """Cells the test occupies (llama.cpp's n_ctx_req, reported as N_KV)."""
    if is_pp_shared:
        return (pp if kv_unified else pl * pp) + pl * tg
    return pl * (pp + tg)


def _decode_chunks(ctx: Context, batch: Batch, n_batch: int) -> None:
    """decode_helper: submit `batch` in n_batch-sized sub-batches."""
    for i in range(0, batch.n_tokens, n_batch):
        sub = Batch(batch.token[i:i + n_batch], batch.pos[i:i + n_batch], batch.seq_id[i:i + n_batch],
                    batch.logits[i:i + n_batch])
        ctx.decode(sub)


def warmup(ctx: Context, rng: random.Random) -> None:
    """16 random tokens of sequence 0, as llama-batched-bench warms up."""
    b = Batch()
    for i in range(16):
        b.add(rng.randrange(ctx.model.n_vocab), i, (0,), logits=False)
    _decode_chunks(ctx, b, ctx.cparams.n_batch)


def run_one(ctx: Context, pp: int, tg: int, pl: int, is_pp_shared: bool, is_tg_separate: bool,
            rng: random.Random) -> BatchedRow:
    """Time one (pp, tg, pl) point on a cleared cache."""
    n_vocab, n_batch = ctx.model.n_vocab, ctx.cparams.n_batch
    kv_unified = ctx.cparams.kv_unified
    batch = Batch()
    for j in range(1 if is_pp_shared else pl):
        for i in range(pp):
            batch.add(rng.randrange(n_vocab), i, (j,), logits=(i == pp - 1))
    ctx.memory.clear()
    t0 = time.perf_counter()
    _decode_chunks(ctx, batch, n_batch)
    t_pp = time.perf_counter() - t0
    if is_pp_shared:
        for s in range(1, pl):
            ctx.memory.seq_cp(0, s, -1, -1)
        if not kv_unified:  # one dummy token applies the stream copies, then is removed
            b = Batch()
            b.add(rng.randrange(n_vocab), pp, (0,), logits=True)
            ctx.decode(b)
            ctx.memory.seq_rm(0, pp, -1)
    t1 = time.perf_counter()
    if is_tg_separate:
        for j in range(pl):
            for i in range(tg):
                batch.clear()
                batch.add(rng.randrange(n_vocab), pp + i, (j,), logits=True)
                _decode_chunks(ctx, batch, n_batch)
    else:
        for i in range(tg):
            batch.clear()
            for j in range(pl):
                batch.add(rng.randrange(n_vocab), pp + i, (j,), logits=True)
            _decode_chunks(ctx, batch, n_batch)
    t_tg = time.perf_counter() - t1
    t = t_pp + t_tg
    n_pp = pp if is_pp_shared else pl * pp
    return BatchedRow(pp, tg, pl, n_ctx_required(pp, tg, pl, is_pp_shared, kv_unified), t_pp,
                      n_pp / t_pp if t_pp > 0 else 0.0, t_tg, pl * tg / t_tg if t_tg > 0 else 0.0, t,
                      (n_pp + pl * tg) / t if t > 0 else 0.0)


@dataclass(frozen=True, slots=True)
class SpecRow:
    """--spec-type: what the drafts did in one (pp, tg, pl) point."""

    n_drafted: int
    n_accepted: int
    n_verify: int  # a slot's draft verified in a step
    ubatches_per_step: float  # the generation steps' ubatches (-ub splits the drafts' rows)


def run_one_spec(ctx: Context, pp: int, tg: int, pl: int, spec, proposers: list, rng: random.Random
                 ) -> tuple[BatchedRow, SpecRow]:
    """One (pp, tg, pl) point with speculative decoding: pl requests of pp random prompt tokens
    and tg greedy tokens each (end-of-generation never sampled) through the server's scheduler,
    each slot drafting on its own, every step one batch; T_PP ends when every slot has its
    first token."""
    from ..sampling import SamplingParams
    from ..server.request import Request
    from ..server.scheduler import Scheduler
    from ..server.slots import SlotState

    n_vocab = ctx.model.n_vocab
    ctx.memory.clear()
    for prop in proposers:
        getattr(prop, "reset", lambda: None)()
    sched = Scheduler(ctx, spec, proposers)
    done: list[int] = []
    for j in range(pl):
        prompt = [rng.randrange(n_vocab) for _ in range(pp)]
        sched.submit(Request(prompt=prompt, max_tokens=tg, sampling=SamplingParams(temp=0.0), ignore_eos=True,
                             sink=lambda ev: done.append(1) if ev.final else None))
    t0 = time.perf_counter()
    while any(sl.state is not SlotState.GENERATING for sl in sched.slots[:pl]) and len(done) < pl:
        sched.update_slots()
    t_pp = time.perf_counter() - t0
    n_dec0 = len(ctx.stats.ubatches_per_decode)
    while len(done) < pl:
        sched.update_slots()
    t_tg = time.perf_counter() - t0 - t_pp
    ub = ctx.stats.ubatches_per_decode[n_dec0:]
    m = sched.metrics
    t = t_pp + t_tg
    row = BatchedRow(pp, tg, pl, n_ctx_required(pp, tg, pl, False, ctx.cparams.kv_unified), t_pp,
                     pl * pp / t_pp if t_pp > 0 else 0.0, t_tg, pl * tg / t_tg if t_tg > 0 else 0.0, t,
                     (pl * pp + pl * tg) / t if t > 0 else 0.0)
    return row, SpecRow(m.n_draft_tokens, m.n_draft_accepted, m.n_draft_verif_steps, sum(ub) / len(ub) if ub else 0.0)


def run_batched_bench(ctx: Context, n_pp: list[int], n_tg: list[int], n_pl: list[int], is_pp_shared: bool = False,
                      is_tg_separate: bool = False, seed: int = 1) -> Iterator[BatchedRow]:
    """Yield one row per (pp, tg, pl) that fits in the context (others are skipped silently,
    as llama.cpp does).  The context must have n_seq_max >= max(n_pl)."""
    if n_pl and max(n_pl) > ctx.cparams.n_seq_max:
        raise ValueError(f"-npl {max(n_pl)} needs n_seq_max >= {max(n_pl)}, the context has {ctx.cparams.n_seq_max}")
    rng = random.Random(seed)
    warmup(ctx, rng)
    n_kv_max = ctx.n_ctx
    for pp, tg, pl in itertools.product(n_pp, n_tg, n_pl):
        if n_ctx_required(pp, tg, pl, is_pp_shared, ctx.cparams.kv_unified) > n_kv_max:
            continue
        yield run_one(ctx, pp, tg, pl, is_pp_shared, is_tg_separate, rng)


def md_header(ctx: Context, is_pp_shared: bool, is_tg_separate: bool, n_threads: int) -> str:
    c = ctx.cparams
    fa = {"auto": -1, "off": 0, "on": 1}.get(str(c.flash_attn), -1)
    return (f"\nmain: n_kv_max = {c.n_ctx}, n_batch = {c.n_batch}, n_ubatch = {c.n_ubatch}, flash_attn = {fa}, "
            f"is_pp_shared = {int(is_pp_shared)}, is_tg_separate = {int(is_tg_separate)}, n_gpu_layers = -1, "
            f"n_threads = {n_threads}, n_threads_batch = {n_threads}\n\n"
            f"|{'PP':>6} | {'TG':>6} | {'B':>4} | {'N_KV':>6} | {'T_PP s':>8} | {'S_PP t/s':>8} | {'T_TG s':>8} | "
            f"{'S_TG t/s':>8} | {'T s':>8} | {'S t/s':>8} |\n"
            f"|{'-' * 7}|-{'-' * 7}|-{'-' * 5}|-{'-' * 7}|-{'-' * 9}|-{'-' * 9}|-{'-' * 9}|-{'-' * 9}|-{'-' * 9}|-{'-' * 9}|")


def md_row(r: BatchedRow) -> str:
    return (f"|{r.pp:6d} | {r.tg:6d} | {r.pl:4d} | {r.n_kv:6d} | {r.t_pp:8.3f} | {r.speed_pp:8.2f} | "
            f"{r.t_tg:8.3f} | {r.speed_tg:8.2f} | {r.t:8.3f} | {r.speed:8.2f} |")


def jsonl_row(ctx: Context, r: BatchedRow, is_pp_shared: bool, n_threads: int) -> str:
    c = ctx.cparams
    fa = {"auto": -1, "off": 0, "on": 1}.get(str(c.flash_attn), -1)
    return (f'{{"n_kv_max": {c.n_ctx}, "n_batch": {c.n_batch}, "n_ubatch": {c.n_ubatch}, "flash_attn": {fa}, '
            f'"is_pp_shared": {int(is_pp_shared)}, "n_gpu_layers": -1, "n_threads": {n_threads}, '
            f'"n_threads_batch": {n_threads}, "pp": {r.pp}, "tg": {r.tg}, "pl": {r.pl}, "n_kv": {r.n_kv}, '
            f'"t_pp": {r.t_pp:f}, "speed_pp": {r.speed_pp:f}, "t_tg": {r.t_tg:f}, "speed_tg": {r.speed_tg:f}, '
            f'"t": {r.t:f}, "speed": {r.speed:f}}}')
