#!/usr/bin/env python3
"""Prompt attention, side by side: the many-row kernel (kernels/c/attn_tiles.c, tiles of 16
query vectors over the f16 cache) against PyTorch's fused SDPA over the cache widened to fp32
(model/layers.py attention, the path prompts took before), calls alternating, the best of each;
or, given two builds of the kernels, A against B.  Causal prompts of n rows with SmolLM2's
heads (9 x 64, 3 KV heads) and Gemma 3 270M's (4 x 256, one KV head).

    .venv/bin/python benchmarks/attn_tiles.py                  # kernel vs SDPA
    .venv/bin/python benchmarks/attn_tiles.py A.so B.so        # two builds
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

SHAPES = {"smollm2": (9, 3, 64), "gemma3": (4, 1, 256)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("libs", nargs="*", help="two kernel builds to compare (default: this tree's against SDPA)")
    ap.add_argument("-n", default="128,512", help="prompt rows")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=40)
    a = ap.parse_args(argv)
    import torch

    from llamapy.kernels import load_kernels
    from llamapy.kernels.build import SIGNATURES
    from llamapy.model.layers import attention

    torch.set_num_threads(a.threads)
    if len(a.libs) not in (0, 2):
        ap.error("give no library or two")
    if a.libs:
        fns = []
        for p in a.libs:
            f = ctypes.CDLL(str(Path(p).resolve())).lp_attn_tiles_f16
            f.argtypes, f.restype = SIGNATURES["lp_attn_tiles_f16"], ctypes.c_int
            fns.append(f)
        names = ("A", "B")
    else:
        lib = load_kernels()
        if lib is None:
            print("no C compiler: the kernels are off")
            return 1
        fns = [None, lib.fn.lp_attn_tiles_f16]
        names = ("SDPA", "tiles")
    print(f"{a.threads} thread(s), best of {a.reps} alternating calls each")
    for model, (n_head, n_head_kv, d) in SHAPES.items():
        for n in (int(v) for v in a.n.split(",")):
            g = torch.Generator().manual_seed(0)
            q = torch.randn(n, n_head, d, generator=g)
            k = torch.randn(n, n_head_kv * d, generator=g).half()
            v = torch.randn(n, n_head_kv * d, generator=g).half()
            mask = torch.full((n, n), float("-inf")).triu(1)
            outs = [torch.empty(n, n_head * d) for _ in fns]

            def call(i: int) -> None:
                if fns[i] is None:
                    outs[i] = attention(q, k.float().view(n, n_head_kv, d), v.float().view(n, n_head_kv, d), mask, 0.125)
                else:
                    fns[i](q.data_ptr(), n, q.stride(0), n_head, n_head_kv, d, d, k.data_ptr(), v.data_ptr(), n,
                           mask.data_ptr(), 0.125, outs[i].data_ptr(), outs[i].stride(0))

            best = [float("inf")] * 2
            for _ in range(a.reps):
                for i in range(2):
                    t = time.perf_counter()
                    call(i)
                    best[i] = min(best[i], time.perf_counter() - t)
            diff = float((outs[0] - outs[1]).abs().max())
            print(f"  {model} {n_head}x{d} ({n_head_kv} KV) causal {n}: {names[0]} {best[0] * 1e3:7.2f} ms  "
                  f"{names[1]} {best[1] * 1e3:7.2f} ms  {best[0] / best[1]:.2f}x  max|diff| {diff:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
