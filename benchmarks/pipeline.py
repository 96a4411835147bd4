#!/usr/bin/env python3
"""Pipeline stages against one process, at one thread per stage (--pp 1: one process with one
thread; --pp 2: two stage processes with one thread each), tokens/s against -ub:

  prefill   one sequence of --n-prompt (2048) random tokens in one batch (n_batch = n_prompt):
            its ubatches are the pipeline's micro-batches, stage 0 runs ubatch k+1 while
            stage 1 runs ubatch k
  decode    --n-seq (16) sequences of 32 prompt tokens, then --n-gen (32) steps of one token
            each, all sequences in one batch per step: with -ub below 16 a step is several
            ubatches, which overlap; at -ub >= 16 a step is one ubatch and nothing overlaps

Each point: one warm-up, then the median of -r runs.  Writes a table and a plot (--plot), the
best -ub of each, and the bubble arithmetic beside the measured ratio: with N equal stages and
M micro-batches a stage idles (N - 1) / (M + N - 1) of the time, so N stages can reach at most
N * M / (M + N - 1) times one process (less what the activations' trips cost).

    .venv/bin/python benchmarks/pipeline.py -m smollm2-135m --plot pipeline.png
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from isa_env import cpu_model  # noqa: E402
from llamapy import Batch, ContextParams  # noqa: E402
from llamapy.pipeline import PipelineParams, open_context  # noqa: E402


def prefill(ctx, n_prompt: int, rng: random.Random) -> float:
    ctx.memory.clear()
    ids = [rng.randrange(ctx.model.n_vocab) for _ in range(n_prompt)]
    t0 = time.perf_counter()
    ctx.decode(Batch.get_one(ids))
    return n_prompt / (time.perf_counter() - t0)


def decode(ctx, n_seq: int, n_gen: int, rng: random.Random) -> float:
    ctx.memory.clear()
    b = Batch()
    for s in range(n_seq):
        for i in range(32):
            b.add(rng.randrange(ctx.model.n_vocab), i, [s], i == 31)
    ctx.decode(b)
    t0 = time.perf_counter()
    for step in range(n_gen):
        b = Batch()
        for s in range(n_seq):
            b.add(rng.randrange(ctx.model.n_vocab), 32 + step, [s], True)
        ctx.decode(b)
    return n_seq * n_gen / (time.perf_counter() - t0)


def measure(model: str, pp: int, ub: int, what: str, a, rng: random.Random) -> float:
    n_ctx = max(a.n_prompt, a.n_seq * (32 + a.n_gen)) + 256
    params = ContextParams(n_ctx=n_ctx, n_batch=max(a.n_prompt, a.n_seq), n_ubatch=ub, n_seq_max=a.n_seq,
                           kv_unified=True, n_threads=1)
    m, ctx = open_context(model, params, PipelineParams(pp=pp))
    try:
        run = (lambda: prefill(ctx, a.n_prompt, rng)) if what == "prefill" else (lambda: decode(ctx, a.n_seq, a.n_gen, rng))
        run()
        return statistics.median(run() for _ in range(a.repetitions))
    finally:
        ctx.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("--n-prompt", type=int, default=2048)
    ap.add_argument("--n-seq", type=int, default=16)
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--ub-prefill", default="64,128,256,512")
    ap.add_argument("--ub-decode", default="2,4,8,16")
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("--plot", default=None, metavar="FILE.png")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(1)
    rows = []
    print(f"# {cpu_model()}; one thread per stage; model {a.model}")
    print("| test | -ub | micro-batches M | --pp 1 t/s | --pp 2 t/s | ratio | bubble (N-1)/(M+N-1) | N(1 - bubble) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for what, ubs in (("prefill", a.ub_prefill), ("decode", a.ub_decode)):
        for ub in (int(x) for x in ubs.split(",")):
            t1 = measure(a.model, 1, ub, what, a, rng)
            t2 = measure(a.model, 2, ub, what, a, rng)
            label = f"prefill {a.n_prompt}" if what == "prefill" else f"decode B={a.n_seq}"
            rows.append((what, ub, t1, t2))
            m = -(-(a.n_prompt if what == "prefill" else a.n_seq) // ub)
            bubble = 1 / (m + 1)  # N = 2
            print(f"| {label} | {ub} | {m} | {t1:.1f} | {t2:.1f} | {t2 / t1:.2f}x | {bubble:.0%} | {2 * (1 - bubble):.2f}x |",
                  flush=True)
    for what in ("prefill", "decode"):
        pts = [r for r in rows if r[0] == what]
        b1, b2 = max(pts, key=lambda r: r[2]), max(pts, key=lambda r: r[3])
        print(f"best -ub, {what}: --pp 1 at -ub {b1[1]} ({b1[2]:.1f} t/s); --pp 2 at -ub {b2[1]} ({b2[3]:.1f} t/s, "
              f"{b2[3] / b1[2]:.2f}x the best --pp 1)")
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, what in zip(axes, ("prefill", "decode")):
            pts = [r for r in rows if r[0] == what]
            ubs = [r[1] for r in pts]
            ax.plot(ubs, [r[2] for r in pts], "o-", label="--pp 1 (1 thread)")
            ax.plot(ubs, [r[3] for r in pts], "s-", label="--pp 2 (1 thread per stage)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("-ub")
            ax.set_ylabel("tokens/s")
            ax.set_title(f"{what} ({a.n_prompt} tokens)" if what == "prefill" else f"batched decode, {a.n_seq} sequences")
            ax.legend()
            ax.grid(alpha=0.3)
        fig.suptitle(f"{a.model}: pipeline stages vs one process ({cpu_model()[:60]})", fontsize=9)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"plot written to {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
