#!/usr/bin/env python3
"""The CPU's fp32 multiply-add ceiling, measured: independent FMA chains in registers (no
memory traffic), on 1 and on all threads, at one ISA level's vector width.  The few-row
products (kernels/c/dot.c fp32 tiles) and PyTorch's fp32 GEMM cannot beat it, so it bounds
what exact fp32 arithmetic can do with a product of a given size.  On x86 it also measures
the ceiling of the lane products' integer instruction (kernels/c/lanes_x86.c): int16 pair
products, `vpdpwssd` on 512 and on 256 bits with AVX512-VNNI, `vpmaddwd` + `vpaddd` on 256
bits at the AVX2 level and AVX-VNNI's `{vex} vpdpwssd` where the CPU has it (avx2+vnni), in
products per ns (each instruction's lanes times two):

    .venv/bin/python benchmarks/fma_peak.py                # native vector width
    .venv/bin/python benchmarks/fma_peak.py --isa avx2     # 256-bit
    .venv/bin/python benchmarks/fma_peak.py --gflop 5.4    # also: ms for 5.4 GFLOP at peak

Not a test: the numbers depend on the machine (and on what else runs on it).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
typedef float vf __attribute__((vector_size(VBYTES)));
int main(int argc, char **argv) {
    const long iters = atol(argv[1]);
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        float sink = 0.0f;
        const double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
        {
            vf a[12], b, c;
            for (int i = 0; i < 12; i++) a[i] = (vf){} + 0.001f * (float)i;
            b = (vf){} + 0.9999f;
            c = (vf){} + 0.0001f;
            for (long k = 0; k < iters / 12; k++) {
#pragma GCC unroll 12
                for (int i = 0; i < 12; i++) a[i] = a[i] * b + c;
            }
            for (int i = 0; i < 12; i++) sink += a[i][0];
        }
        const double dt = omp_get_wtime() - t0;
        const double gflops = (double)iters * omp_get_max_threads() * (VBYTES / 4) * 2 / dt / 1e9;
        best = gflops > best ? gflops : best;
        if (sink == 12345.0f) puts("");
    }
    printf("%.1f\n", best);
    return 0;
}
"""

# int16 pair products: independent accumulator chains of the lanes' instruction, in inline
# assembly (the compiler's own loop over an array of accumulators added register copies)
INT16_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
int main(int argc, char **argv) {
    const long iters = atol(argv[1]);
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = omp_get_wtime();
#pragma omp parallel
        {
            for (long k = 0; k < iters / CHAINS; k++)
                __asm__ volatile(BODY ::: CLOBBERS);
        }
        const double dt = omp_get_wtime() - t0;
        const double per_ns = (double)iters * omp_get_max_threads() * (VBYTES / 4) * 2 / dt / 1e9;
        best = per_ns > best ? per_ns : best;
    }
    printf("%.1f\n", best);
    return 0;
}
"""


def int16_body(kind: str) -> tuple[str, int, int]:
    """(asm body, chains per pass, vector bytes): vpdpwssd on 12 zmm / ymm accumulators, or
    vpmaddwd into a temporary and vpaddd into 6 accumulators (AVX2: 16 registers)."""
    if kind in ("zmm", "ymm"):
        body = "".join(f"vpdpwssd %%{kind}30, %%{kind}31, %%{kind}{i}\\n" for i in range(12))
        return body, 12, 64 if kind == "zmm" else 32
    if kind == "vex":  # AVX-VNNI: the VEX form, ymm0-15 (%{ %}: braces are asm dialect marks to gcc)
        return "".join(f"%{{vex%}} vpdpwssd %%ymm14, %%ymm15, %%ymm{i}\\n" for i in range(12)), 12, 32
    body = "".join(f"vpmaddwd %%ymm14, %%ymm15, %%ymm{12 + i % 2}\\n vpaddd %%ymm{12 + i % 2}, %%ymm{i}, %%ymm{i}\\n"
                   for i in range(6))
    return body, 6, 32


INT16_KINDS = {"avx512": [("vpdpwssd zmm", "zmm"), ("vpdpwssd ymm", "ymm")],
               "avx2": [("vpmaddwd + vpaddd ymm", "madd"), ("AVX-VNNI vpdpwssd ymm", "vex")]}
INT16_NEEDS = {"zmm": "avx512_vnni", "ymm": "avx512_vnni", "vex": "avx_vnni"}

FLAGS = {"avx512": ["-march=x86-64-v4", "-DVBYTES=64"], "avx2": ["-march=x86-64-v3", "-DVBYTES=32"],
         "neon": ["-DVBYTES=16"], "scalar": ["-DVBYTES=4"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--isa", default="native", help="native, avx512, avx2+vnni, avx2, neon or scalar")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--gflop", type=float, default=None, help="also print the time this much work takes at peak")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from llamapy.kernels.build import cpu_features, kernel_level, resolve_level

    level = kernel_level(resolve_level(a.isa, *cpu_features()))
    flags = ["-O2", "-fopenmp", "-ffp-contract=fast", *FLAGS[level]]
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "fma.c", Path(d) / "fma"
        src.write_text(SOURCE)
        subprocess.run(["cc", *flags, str(src), "-o", str(exe)], check=True)
        rows = []
        for t in sorted({1, a.threads}):
            out = subprocess.run([str(exe), "200000000"], check=True, capture_output=True, text=True,
                                 env={**os.environ, "OMP_NUM_THREADS": str(t)})
            rows.append((t, float(out.stdout.split()[-1])))
    for t, g in rows:
        extra = f"; {a.gflop} GFLOP take {a.gflop / g * 1e3:.1f} ms" if a.gflop else ""
        print(f"fp32 FMA peak, {level} ({' '.join(FLAGS[level][:1])}), {t} thread(s): {g:.1f} GFLOP/s{extra}"
              f" ({g / 2:.1f} products a ns)")
    feats = cpu_features()[1]
    for name, kind in INT16_KINDS.get(level, []):
        need = INT16_NEEDS.get(kind)
        if need is not None and need not in feats:
            print(f"int16 pair products, {name}: skipped (the CPU lacks {need})")
            continue
        body, chains, vbytes = int16_body(kind)
        clobbers = ", ".join(f'"xmm{i}"' for i in range(16))
        with tempfile.TemporaryDirectory() as d:
            src, exe = Path(d) / "int16.c", Path(d) / "int16"
            src.write_text(INT16_SOURCE.replace("BODY", f'"{body}"').replace("CLOBBERS", clobbers)
                           .replace("CHAINS", str(chains)).replace("VBYTES", str(vbytes)))
            subprocess.run(["cc", "-O2", "-fopenmp", str(src), "-o", str(exe)], check=True)
            for t in sorted({1, a.threads}):
                out = subprocess.run([str(exe), "200000000"], check=True, capture_output=True, text=True,
                                     env={**os.environ, "OMP_NUM_THREADS": str(t)})
                print(f"int16 pair products, {name}, {t} thread(s): {float(out.stdout.split()[-1]):.1f} products a ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
