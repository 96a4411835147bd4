#!/usr/bin/env python3
"""The decode step's row-wise kernels alone, for one or more builds side by side: one row's
attention over its visible cells (lp_attn_f16; SmolLM2's 9 / 3 heads of 64 and Gemma 3's 4 / 1
of 256 by default) and the SwiGLU / GeGLU rows (lp_glu), µs per call, the best of -r calls,
calls alternating between the libraries (so a shared machine's drift hits each alike), and the
largest difference of their outputs.  Each library is a built .so (`load_kernels()` prints the
cached one of a source tree); none given: this tree's build.

    .venv/bin/python benchmarks/row_ops.py                          # this tree's kernels
    .venv/bin/python benchmarks/row_ops.py A.so B.so --stream       # A/B, K and V from memory
    .venv/bin/python benchmarks/row_ops.py --cells 128,1000 -t 2
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

P, I64, I, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("libs", nargs="*", help="built kernel libraries (default: this tree's)")
    ap.add_argument("--heads", default="9/3/64,4/1/256", help="n_head/n_head_kv/head_dim, comma list")
    ap.add_argument("--cells", default="200,1000", help="visible cells of the one query row, comma list")
    ap.add_argument("--glu", default="1536,2048", help="row lengths of the SwiGLU and GeGLU rows (0: none)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=300)
    ap.add_argument("--stream", action="store_true", help="attention: a different K/V copy each call (~64 MiB in all)")
    a = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # before any library starts its OpenMP runtime

    import numpy as np

    paths = a.libs
    if not paths:
        from llamapy.kernels import load_kernels

        lib = load_kernels()
        if lib is None:
            raise SystemExit("no CPU kernels here (no C compiler?)")
        paths = [str(lib.path)]
    libs = [ctypes.CDLL(os.path.abspath(p)) for p in paths]
    names = "ABCDEFGH"[: len(libs)]
    print(f"{', '.join(f'{n} = {p}' for n, p in zip(names, paths))}; {a.threads} thread(s), best of {a.reps} "
          f"alternating calls" + (", K and V from memory" if a.stream else ", K and V in cache"))
    rng = np.random.default_rng(0)
    for spec in a.heads.split(","):
        n_head, n_head_kv, d = (int(v) for v in spec.split("/"))
        for nc in (int(v) for v in a.cells.split(",")):
            n_cells = nc + 16
            q = rng.standard_normal(n_head * d).astype(np.float32)
            kv_bytes = 2 * n_cells * n_head_kv * d * 2
            n_copies = max(1, (64 << 20) // kv_bytes) if a.stream else 1
            ks = [rng.standard_normal((n_cells, n_head_kv * d)).astype(np.float16) for _ in range(n_copies)]
            vs = [rng.standard_normal((n_cells, n_head_kv * d)).astype(np.float16) for _ in range(n_copies)]
            mask = np.full(nc, 0.0, np.float32)
            ptr = np.array([0, nc], np.int64)
            cells = np.arange(nc, dtype=np.int64)
            outs = [np.zeros(n_head * d, np.float32) for _ in libs]

            def call(lib, k, v, out):
                return lib.lp_attn_f16(P(q.ctypes.data), I64(1), I64(n_head * d), I64(n_head), I64(n_head_kv), I64(d),
                                       I64(d), P(k.ctypes.data), P(v.ctypes.data), I64(nc), P(mask.ctypes.data),
                                       P(ptr.ctypes.data), P(cells.ctypes.data), F(d ** -0.5), P(out.ctypes.data))

            best = _alternate(libs, a.reps, lambda j, i: call(libs[j], ks[(len(libs) * i + j) % n_copies],
                                                              vs[(len(libs) * i + j) % n_copies], outs[j]))
            for lib, out in zip(libs, outs):  # the outputs compared: every library on the same copy
                call(lib, ks[0], vs[0], out)
            _report(f"attention {n_head}/{n_head_kv} heads of {d}, {nc} cells", names, best, outs)
    for n_ff in (int(v) for v in a.glu.split(",") if int(v) > 0):
        gu = rng.standard_normal(2 * n_ff).astype(np.float32) * 3
        for gelu in (0, 1):
            outs = [np.zeros(n_ff, np.float32) for _ in libs]
            best = _alternate(libs, a.reps, lambda j, i: libs[j].lp_glu(P(gu.ctypes.data), I64(1), I64(n_ff), I(gelu),
                                                                        P(outs[j].ctypes.data)))
            _report(f"{'GeGLU' if gelu else 'SwiGLU'} row of {n_ff}", names, best, outs)
    return 0


def _alternate(libs, reps: int, call) -> list[float]:
    """The best time of each library's call(j, i) over reps rounds, the libraries taking turns."""
    best = [float("inf")] * len(libs)
    for i in range(reps):
        for j in range(len(libs)):
            t = time.perf_counter()
            call(j, i)
            best[j] = min(best[j], time.perf_counter() - t)
    return best


def _report(what: str, names: str, best: list[float], outs: list) -> None:
    import numpy as np

    times = "  ".join(f"{n} {b * 1e6:8.1f} us" for n, b in zip(names, best))
    diff = max((float(np.abs(o - outs[0]).max()) for o in outs[1:]), default=0.0)
    ratio = f"  B is {best[0] / best[1]:.3f}x A  max|yA - yB| {diff:.3g}" if len(best) > 1 else ""
    print(f"  {what:<42s} {times}{ratio}")


if __name__ == "__main__":
    sys.exit(main())
