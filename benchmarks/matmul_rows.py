#!/usr/bin/env python3
"""The block-matrix product alone (model/block_matrix.py, kernels/c/mm.c lp_mm): µs per call,
ns per block of 32 weights per thread, and GB/s of weights read, for each GGUF block type and
a few row counts.  Two regimes: the same matrix every call (its 1-2 MB stay in cache: the
kernel's arithmetic) and `--stream`, a different copy each call over ~60 MiB (the weights
come from memory, as in a real decode step).

    .venv/bin/python benchmarks/matmul_rows.py                 # in cache
    .venv/bin/python benchmarks/matmul_rows.py --stream        # from memory
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="3072x576", help="n_out x n_in (SmolLM2's gate|up by default)")
    ap.add_argument("--rows", default="1,4,16", help="activation rows, comma list")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--stream", action="store_true", help="a different copy of the matrix each call (~60 MiB)")
    ap.add_argument("--isa", default=None, help="LLAMAPY_CPU_ISA level (native, avx512, avx2, neon, scalar)")
    ap.add_argument("--types", default="Q4_0,Q4_1,Q8_0,Q5_0,Q4_K,Q6_K", help="GGUF types, comma list")
    a = ap.parse_args(argv)

    import gguf
    import numpy as np
    import torch

    from llamapy.kernels import load_kernels
    from llamapy.model.block_matrix import block_matrix

    T = gguf.GGMLQuantizationType
    lib = load_kernels(a.isa)
    if lib is None:
        print("the CPU kernels are unavailable (no C compiler, or LLAMAPY_KERNELS=0)")
        return 1
    torch.set_num_threads(a.threads)
    n_out, n_in = (int(v) for v in a.shape.split("x"))
    print(f"kernels {lib.path.name} ({lib.isa}), {a.threads} threads, [{n_out}x{n_in}], "
          f"{'from memory' if a.stream else 'in cache'}")
    for qt in (T[t] for t in a.types.split(",")):
        if n_in % gguf.GGML_QUANT_SIZES[qt][0]:
            print(f"  {qt.name:<5} skipped: n_in {n_in} is not a whole number of its {gguf.GGML_QUANT_SIZES[qt][0]}-blocks")
            continue
        raw = _random_matrix(qt, n_out, n_in)
        n_copies = max(1, (60 << 20) // raw.nbytes) if a.stream else 1
        mats = [block_matrix([(torch.from_numpy(raw.copy()), qt, (n_out, n_in))], lib) for _ in range(n_copies)]
        for rows in (int(r) for r in a.rows.split(",")):
            x = torch.randn(rows, n_in)
            for m in mats:
                m(x)
            reps = max(1, 2000 // len(mats) // rows)
            t0 = time.perf_counter()
            for _ in range(reps):
                for m in mats:
                    m(x)
            dt = (time.perf_counter() - t0) / (reps * len(mats))
            blocks = n_out * n_in // 32  # per 32 weights, whatever the type's block
            print(f"  {qt.name:<5} rows {rows:3d}: {dt * 1e6:8.1f} µs  {dt / blocks * 1e9 * a.threads:6.2f} ns/block/thread"
                  f"  {mats[0].nbytes / dt / 1e9:6.1f} GB/s")
    return 0


def _random_matrix(qt, n_out: int, n_in: int):
    """uint8 [n_out, row bytes]: gguf's quantization of random weights, or random blocks with
    small f16 scales for the K-quants gguf cannot quantize."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    try:
        return gguf.quants.quantize(rng.standard_normal((n_out, n_in)).astype(np.float32), qt).view(np.uint8)
    except (NotImplementedError, gguf.quants.QuantError):
        be, bb = gguf.GGML_QUANT_SIZES[qt]
        b = rng.integers(0, 256, size=(n_out * n_in // be, bb), dtype=np.uint8)
        return b.reshape(n_out, -1)


if __name__ == "__main__":
    sys.exit(main())
