#!/usr/bin/env python3
"""The cost of --deterministic (docs/deterministic.md): pp512 (one 512-token prompt), tg128
(128 one-token decodes) and B=16 (16 sequences, each step one token per sequence), with and
without the flag, interleaved rep by rep in one process so that a shared CPU's noise falls on
both alike, after --warmup untimed runs of each (the first run of a path pays its one-time costs:
oneDNN's primitives, first-touch pages, the kernels' scratch).  As llama-bench, each (test, mode)
keeps one context, its memory cleared before each run (a context's kept compute buffer, model/work.py,
is grown by its first ubatch, as llama.cpp reserves its compute buffer when the context is made).  Prints the median tokens per second
of --reps and the ratio deterministic / default.

  PYTHONPATH=src python benchmarks/deterministic.py -m smollm2-135m -m gemma3-270m -t 2 -r 2
"""
from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

import torch

from llamapy import Batch, Context, ContextParams
from llamapy.model.model import Model
from llamapy.registry import pull


def _ctx(model: Model, det: bool, threads: int, n_seq: int = 1) -> Context:
    return Context(model, ContextParams(n_ctx=1024 * n_seq if n_seq > 1 else 1024, n_batch=512, n_ubatch=512,
                                        n_seq_max=n_seq, n_threads=threads, deterministic=det))


def _toks(n: int, n_vocab: int, seed: int) -> list[int]:
    return random.Random(seed).choices(range(1000, min(n_vocab, 20000)), k=n)


def pp(ctx: Context, model: Model, n: int = 512) -> float:
    ctx.memory.clear()
    b = Batch()
    for i, t in enumerate(_toks(n, model.n_vocab, 1)):
        b.add(t, i, [0], logits=i == n - 1)
    t0 = time.perf_counter()
    ctx.decode(b)
    return n / (time.perf_counter() - t0)


def tg(ctx: Context, model: Model, n: int = 128) -> float:
    ctx.memory.clear()
    toks = _toks(n, model.n_vocab, 2)
    t0 = time.perf_counter()
    for i, t in enumerate(toks):
        b = Batch()
        b.add(t, i, [0], logits=True)
        ctx.decode(b)
    return n / (time.perf_counter() - t0)


def batched(ctx: Context, model: Model, n_seq: int = 16, n_prompt: int = 32, n_gen: int = 32) -> float:
    """B=n_seq: prompts of n_prompt each (not timed), then n_gen steps of one token per sequence."""
    ctx.memory.clear()
    b = Batch()
    for s in range(n_seq):
        for i, t in enumerate(_toks(n_prompt, model.n_vocab, 10 + s)):
            b.add(t, i, [s], logits=i == n_prompt - 1)
    ctx.decode(b)
    toks = _toks(n_gen * n_seq, model.n_vocab, 3)
    t0 = time.perf_counter()
    for j in range(n_gen):
        b = Batch()
        for s in range(n_seq):
            b.add(toks[j * n_seq + s], n_prompt + j, [s], logits=True)
        ctx.decode(b)
    return n_gen * n_seq / (time.perf_counter() - t0)


def cpu_name() -> str:
    """/proc/cpuinfo's model name (Linux), else the platform's processor string."""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="registered name or .gguf (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each test and mode first (default 1)")
    a = ap.parse_args()
    import logging

    logging.getLogger("llamapy").setLevel(logging.ERROR)
    print(f"# CPU: {cpu_name()}, {a.threads} threads (shared machine? ratios only); torch {torch.__version__}")
    print("| model | test | default t/s | deterministic t/s | ratio |\n|---|---|---:|---:|---:|")
    for name in a.model or ["smollm2-135m", "gemma3-270m"]:
        model = Model.load(pull(name) if not name.endswith(".gguf") else name)
        for test, fn, n_seq in (("pp512", pp, 1), ("tg128", tg, 1), ("B=16 tg", batched, 16)):
            got = {False: [], True: []}
            ctxs = {det: _ctx(model, det, a.threads, n_seq) for det in (False, True)}
            for _ in range(a.warmup):
                for det in (False, True):
                    fn(ctxs[det], model)
            for _ in range(a.reps):
                for det in (False, True):  # interleaved
                    got[det].append(fn(ctxs[det], model))
            for ctx in ctxs.values():
                ctx.close()
            d0, d1 = statistics.median(got[False]), statistics.median(got[True])
            print(f"| {name} | {test} | {d0:.1f} | {d1:.1f} | {d1 / d0:.2f} |", flush=True)


if __name__ == "__main__":
    main()
