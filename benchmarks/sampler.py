#!/usr/bin/env python3
"""One token's draw from a row of logits, as the server and `llamapy run` take it: the greedy
pick (temperature 0) and llama.cpp's default chain (top-k 40, top-p 0.95, min-p 0.05,
temperature 0.8), µs per call, the median of -r calls, for vocabularies of SmolLM2's and
Gemma 3's size.  With the kernels (lp_argmax, lp_topk) by default; LLAMAPY_KERNELS=0 takes
PyTorch's argmax / topk, the path before them:

    .venv/bin/python benchmarks/sampler.py
    LLAMAPY_KERNELS=0 .venv/bin/python benchmarks/sampler.py
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", default="49152,262144", help="row lengths (SmolLM2's, Gemma 3's)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=300)
    a = ap.parse_args(argv)

    import torch

    from llamapy.kernels import load_kernels
    from llamapy.sampling import Sampler, SamplingParams

    torch.set_num_threads(a.threads)
    lib = load_kernels()
    print(f"kernels: {lib.isa if lib is not None else 'off (PyTorch argmax / topk)'}, {a.threads} threads")
    g = torch.Generator().manual_seed(0)
    for n in (int(v) for v in a.vocab.split(",")):
        x = torch.randn(n, generator=g) * 3  # [n_vocab]
        for name, params in (("greedy", SamplingParams(temp=0.0)), ("default chain", SamplingParams(seed=1))):
            s = Sampler(params)
            for _ in range(20):
                s.sample(x)
            ts = []
            for _ in range(a.reps):
                t = time.perf_counter()
                s.sample(x)
                ts.append(time.perf_counter() - t)
            print(f"  n_vocab {n:7d}  {name:13s} {statistics.median(ts) * 1e6:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
