"""KernelLib: the loaded kernel library as its callers see it (the ctypes handle, its ISA level
and the choices that go with it).  The type below both the build (kernels/build.py, which makes
one) and the timing of its paths (kernels/calibrate.py, which reads one)."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class KernelLib:
    """The loaded library: `fn.<name>` are the C functions with their argtypes set."""

    path: Path
    fn: ctypes.CDLL
    level: str  # avx512 | avx2 | neon | scalar (avx2+vnni runs the avx2 level's kernels)
    isa: str  # what the build uses, e.g. "avx512+vnni+bf16", "avx2+vnni", "neon+dotprod", "scalar"
    many_bf16: bool = True  # a bf16 CPU's coarse types take a bf16 GEMM from DENSE_ROWS rows (kernels/calibrate.py)

    @property
    def bf16(self) -> bool:
        """The CPU multiplies bf16 natively (AVX512-BF16): a bf16 GEMM is the fast prefill path."""
        return "bf16" in self.isa

    @property
    def coarse_bf16(self) -> bool:
        """This bf16 CPU's coarse types take bf16 from 5 to DENSE_ROWS - 1 rows (the library's
        flag, one per process: kernels/calibrate.py), else the integer products."""
        return self.bf16 and bool(self.fn.lp_coarse_bf16())

    @property
    def amx(self) -> bool:
        """Prompt-sized products run on AMX tiles (kernels/c/amx_x86.c): the build has AMX-INT8,
        Linux granted the tile state, and LLAMAPY_AMX is not 0."""
        return bool(self.fn.lp_amx_on())

    @property
    def coarse_many_bf16(self) -> bool:
        """This bf16 CPU's coarse types take a bf16 GEMM from DENSE_ROWS rows, else the lanes."""
        return self.bf16 and self.many_bf16
