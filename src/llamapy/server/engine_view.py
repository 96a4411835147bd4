"""The /engine view's data: one JSON-ready dict per scheduler step, built only from what the
scheduler and the context already keep (the KV cells' bookkeeping, the step's BatchRows, the
decode's ubatch sizes, the slots, the server counters, the Context's MemoryEstimate).

KV cells travel run-length encoded per stream: `runs` is [[code, length], ...] over the
stream's cells in index order, code = the one sequence that sees the cell, SHARED (-2) for a
cell two or more sequences see (a shared prefix), EMPTY (-1) for a free cell."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..context import Context
from ..memory.factory import local_memory
from ..memory.kv_cache import N_PAD
from .metrics import ServerMetrics
from .slots import Slot
from .step_batch import BatchRow


class Scheduler(Protocol):
    """What a view reads of the scheduler (server/scheduler.py), which imports this module."""

    ctx: Context
    slots: list[Slot]
    last_batch: list[BatchRow]
    metrics: ServerMetrics

EMPTY, SHARED = -1, -2
RSS_EVERY_S = 1.0  # /proc/self/status is read at most this often


def _seq_masks(seq: np.ndarray) -> np.ndarray:
    """Each cell's sequences as the bits of one integer [size] (bit s: sequence s sees it); a
    few column ORs, where summing the bool rows costs ten times more (a 2.5 ms step view at
    32768 cells)."""
    n_seq = seq.shape[1]
    mask = np.zeros(seq.shape[0], dtype=np.uint8 if n_seq <= 8 else np.uint64)
    cols = seq.view(np.uint8)
    for s in range(n_seq):
        mask |= cols[:, s].astype(mask.dtype) << mask.dtype.type(s)
    return mask


def _code(mask: int) -> int:
    return EMPTY if mask == 0 else SHARED if mask & (mask - 1) else mask.bit_length() - 1


def cell_runs(seq: np.ndarray, n_used_p1: int | None = None) -> tuple[list[list[int]], list[int]]:
    """(runs, cells per sequence) of one stream; seq: bool [size, n_seq_max]; cells from
    n_used_p1 on (when given) are known to be empty."""
    size, n_seq = seq.shape
    per_seq = [int(np.count_nonzero(seq[:, s])) for s in range(n_seq)]
    end = size if n_used_p1 is None else n_used_p1
    if n_seq > 64:  # wider than one integer: per cell in numpy
        count = seq[:end].sum(axis=1)  # [end]
        code = np.where(count == 0, EMPTY, np.where(count > 1, SHARED, seq[:end].argmax(axis=1)))
    else:
        code = _seq_masks(seq[:end])  # [end]
    runs: list[list[int]] = []
    if end:
        starts = np.concatenate(([0], np.flatnonzero(code[1:] != code[:-1]) + 1))
        ends = np.concatenate((starts[1:], [end]))
        conv = (lambda v: int(v)) if n_seq > 64 else (lambda v: _code(int(v)))
        for a, b in zip(starts, ends):
            c = conv(code[a])
            if runs and runs[-1][0] == c:  # cells shared by different sets of sequences: one SHARED run
                runs[-1][1] += int(b - a)
            else:
                runs.append([c, int(b - a)])
    if end < size:
        if runs and runs[-1][0] == EMPTY:
            runs[-1][1] += size - end
        else:
            runs.append([EMPTY, size - end])
    return runs, per_seq


def read_rss() -> int:
    """This process's resident set in bytes (VmRSS of /proc/self/status; 0 where there is none)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass(slots=True)
class EngineView:
    """Builds the per-step dicts; keeps the little state a step's view needs from the last one
    (draft acceptance as a difference of the server's counters, the throttled RSS)."""

    n_draft_prev: int = 0
    n_accepted_prev: int = 0
    rss: int = 0
    t_rss: float = -1e9
    predicted: dict[str, int] = field(default_factory=dict)

    def memory(self, sched: Scheduler) -> dict[str, int]:
        """What `llamapy mem` predicts for this context (weights, KV, compute, output) and RSS."""
        if not self.predicted:
            e = sched.ctx.estimate
            self.predicted = {"weights": int(e.weights), "kv": int(e.kv), "compute": int(e.compute), "output": int(e.output)}
        now = time.monotonic()
        if now - self.t_rss >= RSS_EVERY_S:
            self.rss, self.t_rss = read_rss(), now
        return {**self.predicted, "rss": self.rss}

    def kv(self, sched: Scheduler) -> dict[str, Any]:
        mem = local_memory(sched.ctx.memory)
        streams = []
        for st, cells in enumerate(mem.cells):
            runs, per_seq = cell_runs(cells.seq, cells.used_max_p1())
            streams.append({"stream": st, "size": int(cells.size), "used": int(cells.used()), "n_kv": int(mem.n_kv(st)),
                            "runs": runs, "cells_per_seq": per_seq})
        return {"unified": bool(mem.unified), "n_pad": N_PAD, "streams": streams}

    def batch(self, sched: Scheduler) -> dict[str, Any]:
        """The step just decoded: per slot its rows by kind (gen / draft / prompt), the rows in
        order ([slot, "g" | "d" | "p"]), the ubatches the context cut it into (-b / -ub) and
        the drafts proposed / accepted since the last one."""
        per_slot: dict[int, dict[str, int]] = {}
        for r in sched.last_batch:
            d = per_slot.setdefault(r.slot, {"gen": 0, "draft": 0, "prompt": 0})
            d[r.kind] += 1
        m = sched.metrics
        drafted, accepted = m.n_draft_tokens - self.n_draft_prev, m.n_draft_accepted - self.n_accepted_prev
        self.n_draft_prev, self.n_accepted_prev = m.n_draft_tokens, m.n_draft_accepted
        stats = sched.ctx.stats
        return {"step": m.n_decode_total, "n_tokens": len(sched.last_batch),
                "slots": [{"id": k, **v} for k, v in sorted(per_slot.items())],
                "rows": [[r.slot, r.kind[0]] for r in sched.last_batch],
                "ubatches": list(getattr(stats, "last_ubatch_sizes", ())),
                "draft_proposed": drafted, "draft_accepted": accepted}

    def slots(self, sched: Scheduler, infos: list[dict]) -> list[dict]:
        now = time.perf_counter()
        out = []
        for s, info in zip(sched.slots, infos):
            t_gen = now - s.t_prompt_done if s.t_prompt_done and not s.is_idle else 0.0
            out.append({**info, "tokens_per_s": s.n_decoded / t_gen if t_gen > 0 else 0.0})
        return out

    def build(self, sched: Scheduler, infos: list[dict], metrics: dict, batches: list[dict]) -> dict[str, Any]:
        """The view after a step; infos / metrics: the scheduler's fresh /slots and counter
        snapshots; batches: the batch() of each step since the last view, oldest first."""
        c = sched.ctx.cparams
        return {
            "step": int(metrics["n_decode_total"]), "t": time.time(),
            "config": {"n_ctx": c.n_ctx, "n_ctx_seq": c.n_ctx_seq, "n_seq_max": c.n_seq_max, "n_batch": c.n_batch,
                       "n_ubatch": c.n_ubatch, "kv_unified": c.kv_unified},
            "kv": self.kv(sched), "batches": batches,
            "batch": batches[-1] if batches else {"step": 0, "n_tokens": 0, "slots": [], "rows": [], "ubatches": [],
                                                  "draft_proposed": 0, "draft_accepted": 0},
            "slots": self.slots(sched, infos),
            "queue": int(metrics["n_requests_deferred"]), "memory": self.memory(sched),
            "metrics": {k: metrics[k] for k in ("kv_cells_used", "kv_cells_total", "kv_cells_cached", "n_tokens_predicted_total",
                                                "n_prompt_tokens_processed_total", "n_decode_total")},
        }
