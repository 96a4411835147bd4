"""Build and load cpu_kernels.c: compiled once per machine and source (gcc -O3 -march=native
-fopenmp, about two seconds), cached under ~/.cache/llamapy/kernels/<hash>/, loaded with
ctypes.  When no C compiler is found or the build fails, load_kernels() returns None with
the reason logged once, and every caller keeps its PyTorch path.

LLAMAPY_KERNELS=0 turns the kernels off (the PyTorch paths then run everywhere);
LLAMAPY_KERNELS_GENERIC=1 builds the portable C loops without the AVX-512 intrinsics (the
tests compare the two)."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..log import logger

ABI_VERSION = 3
SOURCE = Path(__file__).with_name("cpu_kernels.c")

P, I64, I, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
SIGNATURES: dict[str, tuple] = {  # name -> argument types (all return void unless listed in RETURNS)
    "lp_dequant": (I, P, I64, I64, I64, P),
    "lp_dequant_bf16": (I, P, I64, I64, I64, P),
    "lp_get_rows": (I, P, I64, P, I64, P),
    "lp_mm": (I, P, I64, I64, P, I64, P, I64, I),
    "lp_rms_norm": (P, P, I64, I64, F, P),
    "lp_swiglu": (P, I64, I64, P),
    "lp_rope": (P, I64, I64, I64, I64, I64, P, P, I),
    "lp_attn_f16": (P, I64, I64, I64, I64, I64, I64, P, P, I64, P, P, P, F, P),
    "lp_llama_layers": (P, I64, P, P, I64, P, P, P, P, I64, P, P),
}
RETURNS = {"lp_abi_version": ctypes.c_int, "lp_simd": ctypes.c_int, "lp_llama_layers": ctypes.c_int}


@dataclass(frozen=True, slots=True)
class KernelLib:
    """The loaded library: `fn.<name>` are the C functions with their argtypes set."""

    path: Path
    fn: ctypes.CDLL
    simd: int  # 0: the portable loops; 512 AVX-512 + 4 with BF16 + 1 with VNNI (cpu_kernels.c lp_simd)


def _flags(generic: bool) -> list[str]:
    flags = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math"]
    return flags + (["-mno-avx512f"] if generic else [])


def _cpu_id() -> str:
    """What -march=native depends on: the CPU's model and feature flags (Linux), so a cache
    shared between machines never hands one CPU's build to another."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform

        return platform.processor() + platform.machine()
    lines = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(lines)))


def _build(cc: str, generic: bool) -> Path:
    """Compile into the cache (atomically: a temp file renamed into place); returns the .so path."""
    flags = _flags(generic)
    src = SOURCE.read_bytes()
    key = hashlib.sha256(src + " ".join([cc, *flags, _cpu_id()]).encode()).hexdigest()[:16]
    root = Path(os.environ.get("LLAMAPY_CACHE", Path.home() / ".cache" / "llamapy")) / "kernels" / key
    lib = root / "libllamapy_cpu.so"
    if lib.exists():
        return lib
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=root)
    os.close(fd)
    try:
        r = subprocess.run([cc, *flags, str(SOURCE), "-o", tmp, "-lm"], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"{cc} failed ({r.returncode}): {r.stderr.strip()[-800:]}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


@functools.lru_cache(maxsize=2)
def load_kernels(generic: bool | None = None) -> KernelLib | None:
    """The kernel library, built on first use; None (reason logged) when unavailable or
    turned off with LLAMAPY_KERNELS=0."""
    log = logger("llamapy_kernels")
    if os.environ.get("LLAMAPY_KERNELS", "1") == "0":
        return None
    if generic is None:
        generic = os.environ.get("LLAMAPY_KERNELS_GENERIC", "0") == "1"
    import torch  # noqa: F401  (its libgomp.so.1 must be loaded first, so ours resolves to it)

    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        log.warning("no C compiler (gcc/cc) found: the CPU kernels are off, PyTorch paths are used")
        return None
    try:
        path = _build(cc, generic)
        fn = ctypes.CDLL(str(path))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        log.warning(f"CPU kernels unavailable, PyTorch paths are used: {e}")
        return None
    for name, args in SIGNATURES.items():
        f = getattr(fn, name)
        f.argtypes, f.restype = list(args), None
    for name, res in RETURNS.items():
        getattr(fn, name).restype = res
    if fn.lp_abi_version() != ABI_VERSION:
        log.warning(f"{path}: ABI {fn.lp_abi_version()} != {ABI_VERSION}; the CPU kernels are off")
        return None
    return KernelLib(path, fn, fn.lp_simd())
