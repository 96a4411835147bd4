"""`llamapy quantize`: llama-quantize, a GGUF rewritten with its weights as another type."""
from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser("quantize", help="llama-quantize: write a GGUF with its weights as another type")
    p.add_argument("input", help="GGUF file or registered model name")
    p.add_argument("output", help="GGUF file to write")
    p.add_argument("type", help="F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4_MOE, "
                                        "Q4_K_S, Q4_K_M, Q5_K_S or Q5_K_M")
    p.add_argument("--allow-requantize", action="store_true",
                   help="convert tensors that are already quantized to another block type (loses precision twice)")
    p.add_argument("--force", action="store_true", help="overwrite the output file if it exists")
    p.set_defaults(fn=cmd_quantize)


def cmd_quantize(a: argparse.Namespace) -> int:
    """llama-quantize's output: a progress line, then its model size / quant size lines."""
    import time
    from pathlib import Path

    from ..pull import StderrProgress
    from ..quantize import gguf_block, quantize_file
    from ..registry import resolve_model

    src, dst = resolve_model(a.input), Path(a.output)
    bar = StderrProgress()
    t0 = time.perf_counter()
    rep = quantize_file(src, dst, a.type, allow_requantize=a.allow_requantize, force=a.force,
                        progress=lambda done, total: bar("quantize", f"{src.name} -> {dst.name} as {a.type.upper()}",
                                                         done, total))
    log = "llama_model_quantize_impl"
    mib = 2.0**20
    print(f"{log}: model size  = {rep.bytes_in / mib:8.2f} MiB ({rep.bytes_in * 8 / rep.n_elements:.2f} BPW)\n"
          f"{log}: quant size  = {rep.bytes_out / mib:8.2f} MiB ({rep.bytes_out * 8 / rep.n_elements:.2f} BPW)\n"
          f"{log}: tensors: {', '.join(f'{n} {k}' for k, n in rep.counts.items())}; "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    fallbacks = [p for p in rep.plans if p.fell_back_from is not None]
    for p in fallbacks:
        print(f"warning: {p.name:<36} - ncols {p.shape[-1]:6d} not divisible by {gguf_block(p.fell_back_from):3d} "
              f"(required for type {p.fell_back_from.name.lower():>7}) -> falling back to {p.out_type.name.lower():>7}",
              file=sys.stderr)
    if fallbacks:
        print(f"{log}: WARNING: {len(fallbacks)} of {len(rep.plans)} tensor(s) required fallback quantization",
              file=sys.stderr)
    return 0
