#!/usr/bin/env python3
"""Two builds of llamapy's CPU kernels, A and B, in one decode: the model loaded once, a prompt
of -p tokens, then the same one-token decode step (all layers, logits) with library A, its
cell removed, with B, removed, A, B .. (a shared machine's drift hits both alike); the median
and best step time of each, and the largest difference of their logits.  kernel_ab.py times
one product; this times what a user's tokens/s reads, barriers and all.

    .venv/bin/python benchmarks/decode_ab.py A.so B.so -m gemma3-270m -r 200
    .venv/bin/python benchmarks/decode_ab.py A.so B.so -m gemma3-270m -B 16 -r 30   # batched decode
    LLAMAPY_DETERMINISTIC=1 .venv/bin/python benchmarks/decode_ab.py A.so B.so -p 512 --prefill -r 12 -t 1 --cpu-time   # a prompt
Both libraries must be builds of this tree's ABI (each source tree's `load_kernels()` prints
its cached library).  Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import ctypes
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="library A (the baseline)")
    ap.add_argument("b", help="library B")
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("-p", type=int, default=128, help="prompt tokens before the timed steps (per sequence)")
    ap.add_argument("-B", type=int, default=1, help="sequences: a step decodes one token of each (unified cache)")
    ap.add_argument("-r", "--reps", type=int, default=100, help="steps of each library")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--prefill", action="store_true",
                    help="time the prompt's decode (B sequences of -p tokens, the cache emptied after each) instead of a step")
    ap.add_argument("--cpu-time", action="store_true",
                    help="-t 1: time each step as this thread's CPU time (a busy shared machine's waits left out)")
    a = ap.parse_args(argv)
    if a.cpu_time and a.threads != 1:
        ap.error(f"--cpu-time times the calling thread alone: it needs -t 1, not -t {a.threads}")
    clock = time.thread_time if a.cpu_time else time.perf_counter
    os.environ["OMP_NUM_THREADS"] = str(a.threads)

    import torch

    import llamapy
    from llamapy.kernels import load_kernels
    from llamapy.kernels.build import bind_signatures
    from llamapy.registry import resolve_model

    logging.getLogger("llamapy").setLevel(logging.ERROR)
    torch.set_num_threads(a.threads)
    lib = load_kernels()
    if lib is None:
        print("no CPU kernels here")
        return 1
    fns = []
    for path in (a.a, a.b):
        fn = ctypes.CDLL(os.path.abspath(path))
        bind_signatures(fn)
        fns.append(fn)
    own = lib.fn
    model = llamapy.Model.load(resolve_model(a.model))
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=a.B * (a.p + 64), n_seq_max=a.B, kv_unified=True,
                                                       n_threads=a.threads))
    def prompt() -> llamapy.Batch:
        b = llamapy.Batch()
        for s in range(a.B):
            for i in range(a.p):
                b.add((7 + 31 * i + s) % model.n_vocab, i, (s,), logits=i == a.p - 1)
        return b

    if not a.prefill:
        ctx.decode(prompt())
    times: list[list[float]] = [[], []]
    diff = 0.0
    for i in range(a.reps + 2):  # the first two rounds warm both
        logits = []
        for k, fn in enumerate(fns):
            object.__setattr__(lib, "fn", fn)
            if a.prefill:
                step = prompt()
            else:
                step = llamapy.Batch()
                for s in range(a.B):
                    step.add((5 + i + s) % model.n_vocab, a.p, (s,), logits=True)
            t = clock()
            ctx.decode(step)
            dt = clock() - t
            if i >= 2:
                times[k].append(dt)
            logits.append(ctx.get_logits_ith(-1).clone())
            for s in range(a.B):
                ctx.memory.seq_rm(s, 0 if a.prefill else a.p, -1)
        diff = max(diff, float((logits[0] - logits[1]).abs().max()))
    object.__setattr__(lib, "fn", own)
    med = [statistics.median(t) for t in times]
    best = [min(t) for t in times]
    print(f"{a.model}, B={a.B}, prompt {a.p}{' (timed: the prompt itself)' if a.prefill else ''}, {a.threads} threads, "
          f"{a.reps} alternating steps each"
          + (", thread CPU time" if a.cpu_time else ""))
    print(f"  A {med[0] * 1e3:7.3f} ms median {best[0] * 1e3:7.3f} best   B {med[1] * 1e3:7.3f} ms median "
          f"{best[1] * 1e3:7.3f} best   B is {med[0] / med[1]:.3f}x A (median), {best[0] / best[1]:.3f}x (best)   "
          f"max|logits A - B| {diff:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
