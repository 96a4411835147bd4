#!/usr/bin/env python3
"""Where a block matrix's many-row product should switch from the kernels' tiles (kernels/c/
mm.c lp_mm: each weight row dequantized once, fp32 or bf16 register tiles) to dequantizing the
matrix and running PyTorch's dense GEMM (model/block_matrix.py _dense_rows): both paths timed on
every distinct matrix shape of a real model's first layers, for a few row counts, the best of
-r runs each.  kernels/types.py DENSE_ROWS is chosen from these figures.

    .venv/bin/python benchmarks/dense_crossover.py -m gemma3-270m --rows 32,64,128,256,512
    LLAMAPY_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python benchmarks/dense_crossover.py
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def shapes(net, n_layers: int = 2) -> dict:
    """(n_out, n_in, type) -> one BlockMatrix of that shape, from the first layers and the output."""
    from llamapy.model.block_matrix import BlockMatrix

    found: dict = {}

    def walk(o) -> None:
        for f in dataclasses.fields(o) if dataclasses.is_dataclass(o) else []:
            v = getattr(o, f.name)
            if isinstance(v, BlockMatrix):
                found.setdefault((v.n_out, v.n_in, v.qtype.name), v)
            elif dataclasses.is_dataclass(v):
                walk(v)

    for layer in net.layers[:n_layers]:
        walk(layer)
    if isinstance(getattr(net, "output", None), BlockMatrix):
        o = net.output
        found.setdefault((o.n_out, o.n_in, o.qtype.name), o)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("--rows", default="32,64,128,256,512")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5)
    a = ap.parse_args(argv)

    import torch

    import llamapy
    from llamapy.kernels import load_kernels
    from llamapy.kernels.types import DENSE_ROWS

    logging.getLogger("llamapy").setLevel(logging.ERROR)
    torch.set_num_threads(a.threads)
    lib = load_kernels()
    model = llamapy.Model.load(a.model)
    rows = [int(r) for r in a.rows.split(",")]
    print(f"{a.model}, kernels {lib.isa if lib else 'none'}, {a.threads} threads, DENSE_ROWS {DENSE_ROWS}; ms, best of {a.reps}")
    layer_sum = {n: [0.0, 0.0] for n in rows}
    for (n_out, n_in, qt), bm in sorted(shapes(model.net).items()):
        cells = []
        for n in rows:
            x = torch.randn(n, n_in)
            y = torch.empty(n, n_out)
            bt = bd = float("inf")
            for _ in range(a.reps):
                t = time.perf_counter()
                bm._mm(x, y, False, 0)  # the lanes (lp_mm), not the int8 products
                bt = min(bt, time.perf_counter() - t)
                t = time.perf_counter()
                bm._dense_rows(x)
                bd = min(bd, time.perf_counter() - t)
            if bm is not getattr(model.net, "output", None):
                layer_sum[n][0] += bt
                layer_sum[n][1] += bd
            cells.append(f"{n}: tiles {bt * 1e3:7.2f} dense {bd * 1e3:7.2f}")
        print(f"  {qt:5s} {n_out:>6}x{n_in:<5} " + " | ".join(cells))
    print("  layer shapes summed: " + " | ".join(
        f"{n}: tiles {t * 1e3:.1f} dense {d * 1e3:.1f} ({d / t:.2f}x)" for n, (t, d) in layer_sum.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
