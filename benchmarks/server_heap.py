#!/usr/bin/env python3
"""A server's decode under three settings of glibc's heap, each in its own process: glibc's
defaults, the server's setting (`memory/heap.py tune_heap`: mmap threshold 32 MiB, trim
threshold 256 MiB) and the 1 MiB mmap threshold the server used before, with which every
prefill buffer of a MiB or more was a fresh mapping, faulted in page by page.  The load is what
`server_load.py` gives llama-server's `-np 8`: waves of 8 prompts decoded in one batch, then
-n steps of one token for each of the 8 sequences, on a unified cache.

    .venv/bin/python benchmarks/server_heap.py -m gemma3-270m
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"glibc defaults": None, "server (32 MiB, trim 256 MiB)": (32, 256), "old server (1 MiB)": (1, None)}


def waves(model: str, threads: int, n_prompt: int, n_gen: int, n_waves: int, heap: tuple | None) -> list[dict]:
    """In this process: the heap setting, then n_waves waves; prompt t/s and ms a step each."""
    import logging
    import random

    sys.path.insert(0, str(ROOT / "src"))
    from llamapy.memory.heap import tune_heap

    os.environ["LLAMAPY_HEAP"] = "glibc"  # the engine leaves the heap as this setting has it
    if heap is not None:  # the server's own call, with this setting's thresholds
        tune_heap(arenas=2, mmap_threshold=heap[0] << 20, trim_threshold=None if heap[1] is None else heap[1] << 20)
    import torch

    import llamapy
    from llamapy.batch import Batch
    from llamapy.params import ContextParams

    logging.getLogger("llamapy").setLevel(logging.ERROR)
    torch.set_num_threads(threads)
    m = llamapy.Model.load(model)
    ctx = llamapy.Context(m, ContextParams(n_ctx=8192, n_seq_max=8, kv_unified=True, n_threads=threads))
    rng, out = random.Random(0), []
    for _ in range(n_waves + 1):  # the first wave warms up
        for s in range(8):
            ctx.memory.seq_rm(s, -1, -1)
        b = Batch()
        for s in range(8):
            for p in range(n_prompt):
                b.add(rng.randrange(1000, 20000), p, (s,), logits=p == n_prompt - 1)
        t = time.perf_counter()
        ctx.decode(b)
        t_prompt = time.perf_counter() - t
        t = time.perf_counter()
        for g in range(n_gen):
            b = Batch()
            for s in range(8):
                b.add(rng.randrange(1000, 20000), n_prompt + g, (s,), logits=True)
            ctx.decode(b)
        out.append({"prompt_ts": 8 * n_prompt / t_prompt, "step_ms": (time.perf_counter() - t) / n_gen * 1e3})
    return out[1:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="gemma3-270m")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=97, help="prompt tokens of each of the 8 sequences")
    ap.add_argument("-n", "--n-gen", type=int, default=64, help="decode steps of 8 rows after each wave's prompts")
    ap.add_argument("-w", "--waves", type=int, default=3)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        heap = json.loads(a.child)
        print(json.dumps(waves(a.model, a.threads, a.n_prompt, a.n_gen, a.waves, tuple(heap) if heap else None)))
        return 0
    print(f"{a.model}: waves of 8 prompts of {a.n_prompt} tokens, then {a.n_gen} steps of 8 rows; {a.threads} threads")
    for name, heap in SETTINGS.items():
        cmd = [sys.executable, __file__, "-m", a.model, "-t", str(a.threads), "-p", str(a.n_prompt), "-n",
               str(a.n_gen), "-w", str(a.waves), "--child", json.dumps(heap)]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"  {name:30s} prompt " + " / ".join(f"{w['prompt_ts']:.0f}" for w in rows) + " t/s, a step "
              + " / ".join(f"{w['step_ms']:.1f}" for w in rows) + " ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
