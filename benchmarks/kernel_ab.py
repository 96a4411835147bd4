#!/usr/bin/env python3
"""Two builds of llamapy's CPU kernels, A and B, side by side in one process: the same random
matrix of each GGUF block type and the same activation rows through each library's lp_mm,
calls alternating A, B, A, B .. (so a shared machine's drift hits both alike), the best time
of each, and the largest difference of their outputs (0: bit for bit the same sums).  For a
kernel change: build both (each source tree's `load_kernels()` prints its cached library), then

    .venv/bin/python benchmarks/kernel_ab.py A.so B.so                 # one thread, one row
    .venv/bin/python benchmarks/kernel_ab.py A.so B.so --rows 4 -t 2 --types Q4_K,Q6_K --shape 2048x512
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="library A (the baseline)")
    ap.add_argument("b", help="library B")
    ap.add_argument("--types", default="Q4_0,Q4_1,Q5_0,Q5_1,Q8_0")
    ap.add_argument("--shape", default="3072x576", help="n_out x n_in (SmolLM2's gate|up by default)")
    ap.add_argument("--rows", type=int, default=1, help="activation rows")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-r", "--reps", type=int, default=300)
    ap.add_argument("--stream", action="store_true",
                    help="a different copy of the matrix each call (~64 MiB in all): the weights come from memory")
    ap.add_argument("--det", action="store_true", help="time lp_mm_det (--deterministic's products) instead of lp_mm")
    ap.add_argument("--q8", action="store_true",
                    help="time lp_mm_q8 (a prompt's 64+ rows, BlockMatrix's int8 path; the residual pass as library A's "
                         "lp_q8mm_takes says) instead of lp_mm")
    ap.add_argument("--outliers", action="store_true",
                    help="one value of every 256 set to 40 (the rest N(0, 1)) (a SwiGLU row's outlier channels): the K-quants' "
                         "one-row products then take the int16 form (row1q8k_x86.c's outlier rule), not Q8_K")
    ap.add_argument("--cpu-time", action="store_true",
                    help="-t 1: time each call as this thread's CPU time (a busy shared machine's waits left out)")
    a = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # before either library starts its OpenMP runtime

    import gguf
    import numpy as np

    if a.cpu_time and a.threads != 1:
        raise SystemExit(f"--cpu-time times the calling thread only: it needs -t 1 (got -t {a.threads})")
    libs = [ctypes.CDLL(os.path.abspath(p)) for p in (a.a, a.b)]
    fn = "lp_mm_det" if a.det else "lp_mm_q8" if a.q8 else "lp_mm"
    clock = time.thread_time if a.cpu_time else time.perf_counter
    n_out, n_in = (int(v) for v in a.shape.lower().split("x"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.rows, n_in)).astype(np.float32)
    if a.outliers:
        x[:, 17::256] = 40.0
    P, I64, I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    print(f"{fn}, {a.shape}, {a.rows} row(s), {a.threads} thread(s), best of {a.reps} alternating calls each"
          + (" (thread CPU time)" if a.cpu_time else "") + (", outliers: the int16 form" if a.outliers else "")
          + (", the weights from memory" if a.stream else ", the weights in cache"))
    for name in a.types.split(","):
        qt = gguf.GGMLQuantizationType[name]
        if name.endswith("_K"):
            w = _random_blocks(rng, qt, n_out, n_in)
        else:  # gguf's own quantizer (and f16 / bf16 conversion)
            w = gguf.quantize(rng.standard_normal((n_out, n_in)).astype(np.float32), qt)
        w = np.ascontiguousarray(w).view(np.uint8)
        copies = [w] + [w.copy() for _ in range(max(0, (64 << 20) // w.nbytes - 1) if a.stream else 0)]
        ys = [np.zeros((a.rows, n_out), np.float32) for _ in libs]
        best = [float("inf")] * 2
        tail = ()
        if a.q8:  # (lp_mm_q8's last argument: 1 with the outlier blocks' residual pass, 0 int8 alone)
            mode = libs[0].lp_q8mm_takes(I(int(qt)), P(x.ctypes.data), I64(n_in), I64(a.rows))
            if mode == 0:
                raise SystemExit(f"lp_q8mm_takes: library A's lp_mm_q8 does not take {name} x {a.rows} rows of {n_in}")
            tail = (I(int(mode == 1)),)
        for i in range(a.reps):
            for k, lib in enumerate(libs):
                w = copies[(2 * i + k) % len(copies)]  # from memory: never the copy the other library just read
                t = clock()
                rc = getattr(lib, fn)(I(int(qt)), P(w.ctypes.data), I64(n_out), I64(n_in), P(x.ctypes.data), I64(a.rows),
                               P(ys[k].ctypes.data), I64(n_out), I(0), *tail)
                best[k] = min(best[k], clock() - t)
                if rc != 0:
                    raise SystemExit(f"{fn} returned {rc} ({'AB'[k]})")
        diff = float(np.abs(ys[0] - ys[1]).max())
        print(f"  {name:5s} A {best[0] * 1e6:8.1f} us  B {best[1] * 1e6:8.1f} us  B is {best[0] / best[1]:.3f}x A"
              f"  max|yA - yB| {diff:.3g}")
    return 0


def _random_blocks(rng, qt, n_out: int, n_in: int):
    """Random K-quant blocks (gguf cannot quantize them) with small positive f16 super-scales
    (their byte offsets in each block: ggml's block_q2_K .. block_q6_K)."""
    import gguf
    import numpy as np

    T = gguf.GGMLQuantizationType
    scales_at = {T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}[qt]
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    raw = rng.integers(0, 256, size=(n_out * n_in // be, bb), dtype=np.uint8)
    for o in scales_at:
        raw[:, o:o + 2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    return raw


if __name__ == "__main__":
    sys.exit(main())
