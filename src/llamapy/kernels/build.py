"""Build and load llamapy's CPU kernels (kernels/c/*.c): one source compiled once per ISA level
and machine (about ten seconds), cached under $LLAMAPY_CACHE or ~/.cache/llamapy/kernels/<hash>/,
loaded with ctypes.  When no C compiler is found or the build fails, load_kernels() returns None
with the reason logged once, and every caller keeps its PyTorch path.

ISA levels (ggml-cpu's per-ISA variants, chosen at run time from the CPU's features):
  avx512     x86-64-v4 (AVX-512 F/BW/DQ/VL), with VNNI and BF16 where the CPU has them
  avx2+vnni  x86-64-v3 with AVX-VNNI (vpdpwssd on ymm): Intel's AVX2 chips since Alder Lake
  avx2       x86-64-v3 (AVX2, FMA, F16C, BMI2): exactly that level, llama.cpp's GGML_AVX2 build
  neon       ARMv8-A NEON, with the dot-product extension where the CPU has it
  scalar     the portable C loops (the reference every SIMD path is tested against)
LLAMAPY_CPU_ISA=native (the best the CPU runs, the default) | avx512 | avx2+vnni | avx2 | neon |
scalar forces a level; one the CPU lacks is an error naming the missing features.  avx2+vnni
runs every kernel of the avx2 level (KernelLib.level is "avx2") with its int16 pair products
in one instruction instead of two.  LLAMAPY_KERNELS=0 turns the kernels off (the PyTorch paths
then run everywhere)."""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..log import logger
from .calibrate import calibrate_coarse_bf16
from .lib import KernelLib

ABI_VERSION = 11
SOURCE_DIR = Path(__file__).with_name("c")
LEVELS = ("native", "avx512", "avx2+vnni", "avx2", "neon", "scalar")
X86_NEEDS = {"avx512": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma", "f16c"),
             "avx2+vnni": ("avx2", "fma", "f16c", "bmi2", "avx_vnni"),
             "avx2": ("avx2", "fma", "f16c", "bmi2")}
BASE_FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math",
              "-ffp-contract=off")

P, I64, I, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
SIGNATURES: dict[str, tuple] = {  # name -> argument types (all return void unless listed in RETURNS)
    "lp_dequant": (I, P, I64, I64, I64, P),
    "lp_dequant_bf16": (I, P, I64, I64, I64, P),
    "lp_get_rows": (I, P, I64, P, I64, P),
    "lp_mm": (I, P, I64, I64, P, I64, P, I64, I),
    "lp_mm_glu": (I, P, I64, I64, P, I64, P, I64, I),
    "lp_mm_det": (I, P, I64, I64, P, I64, P, I64, I),
    "lp_mm_det_covers": (I, I64),
    "lp_det_reads": (I,),
    "lp_q8mm_covers": (I, I64, I64),
    "lp_q8mm_set": (I, F, F),
    "lp_q8mm_takes": (I, P, I64, I64),
    "lp_q8mm_mode": (I, P, I64, I64),
    "lp_q8k_takes": (I, P, I64, I64),
    "lp_mm_q8": (I, P, I64, I64, P, I64, P, I64, I, I),
    "lp_q8mm_flagged": (P, I64, I64),
    "lp_q8p_set": (I,),
    "lp_q8p_covers": (I,),
    "lp_q8mm32_set": (F, F),
    "lp_q8mm32_fixes": (P, I64, I64, F, I),
    "lp_rms_norm": (P, P, I64, I64, F, P),
    "lp_glu": (P, I64, I64, I, P),
    "lp_glu_rows": (P, I64, P, I64, I64, I64, I, P),
    "lp_rope": (P, I64, I64, I64, I64, I64, P, P, I),
    "lp_qk_norm_rope": (P, I64, I64, P, I64, I64, I64, I64, P, P, F, I64, P, P, I),
    "lp_rms_norm_add": (P, I64, P, I64, I64, F, P),
    "lp_attn_f16": (P, I64, I64, I64, I64, I64, I64, P, P, I64, P, P, P, F, P),
    "lp_attn_kv": (P, I64, I64, I64, I64, I64, I64, I, P, I, P, I64, P, P, P, F, P),
    "lp_attn_det_f16": (P, I64, I64, I64, I64, I64, I64, P, P, I64, P, P, P, F, P),
    "lp_attn_kv_sinks": (P, I64, I64, I64, I64, I64, I64, I, P, I, P, I64, P, P, P, F, P, P),
    "lp_kv_quantize": (I, P, I64, I64, P),
    "lp_attn_tiles_f16": (P, I64, I64, I64, I64, I64, I64, P, P, I64, P, F, P, I64),
    "lp_layers": (P, I64, P, P, I64, P, P, I64, P, I64),
    "lp_layers_work_bytes": (P, I64, P, I64, P, I64),
    "lp_argmax": (P, I64),
    "lp_topk": (P, I64, I64, P, P),
    "lp_set_coarse_bf16": (I,),
    "lp_coarse_bf16": (),
    "lp_amx_on": (),
    "lp_amx_set": (I,),
    "lp_amxk_set": (I,),
    "lp_cpu_amd_family": (),
    "lp_cpu_q8k_few": (),
    "lp_cpu_q8k_few_set": (I,),
    "lp_q8kz_takes": (I64,),
    "lp_q8kz_set": (I,),
    "lp_row1_i8": (I, I64),
    "lp_lanes8_takes": (I, I64, I64),
    "lp_row1_i8_set": (I,),
    "lp_amxk_covers": (I, I64),
    "lp_moe_row": (P, P, I64, I64, P, P, P, I64, I64, I64, I64, I64, I64, I64, I64, P, P, P),
    "lp_moe_rows": (P, I64, I64, P, P, P, P, P, P, I64, I64, I64, I64, I64, I64, I64, I64, P, P, I64),
    "lp_moe_rows_bytes": (I64, I64, P, I64, I64),
    "lp_moe_rows_amx": (I,),
}
RETURNS = {"lp_mm_det": ctypes.c_int, "lp_mm_det_covers": ctypes.c_int, "lp_det_reads": ctypes.c_int, "lp_q8mm_covers": ctypes.c_int,
           "lp_q8mm_takes": ctypes.c_int, "lp_q8mm_mode": ctypes.c_int, "lp_q8k_takes": ctypes.c_int,
           "lp_mm_q8": ctypes.c_int, "lp_q8p_set": ctypes.c_int, "lp_q8p_covers": ctypes.c_int,
           "lp_q8mm_flagged": ctypes.c_double, "lp_q8mm32_fixes": ctypes.c_double,
           "lp_abi_version": ctypes.c_int, "lp_isa": ctypes.c_char_p, "lp_mm": ctypes.c_int, "lp_mm_glu": ctypes.c_int, "lp_coarse_bf16": ctypes.c_int,
           "lp_amx_on": ctypes.c_int, "lp_amx_set": ctypes.c_int, "lp_amxk_set": ctypes.c_int, "lp_amxk_covers": ctypes.c_int,
           "lp_cpu_amd_family": ctypes.c_int, "lp_cpu_q8k_few": ctypes.c_int, "lp_cpu_q8k_few_set": ctypes.c_int,
           "lp_q8kz_takes": ctypes.c_int, "lp_q8kz_set": ctypes.c_int,
           "lp_row1_i8": ctypes.c_int, "lp_lanes8_takes": ctypes.c_int, "lp_row1_i8_set": ctypes.c_int,
           "lp_attn_f16": ctypes.c_int, "lp_attn_det_f16": ctypes.c_int, "lp_attn_kv": ctypes.c_int, "lp_attn_kv_sinks": ctypes.c_int, "lp_attn_tiles_f16": ctypes.c_int, "lp_layers": ctypes.c_int,
           "lp_layers_work_bytes": ctypes.c_int64,
           "lp_argmax": ctypes.c_int64, "lp_topk": ctypes.c_int64, "lp_moe_row": ctypes.c_int,
           "lp_moe_rows": ctypes.c_int, "lp_moe_rows_bytes": ctypes.c_int64,
           "lp_moe_rows_amx": ctypes.c_int}


class IsaError(ValueError):
    """LLAMAPY_CPU_ISA names a level this CPU cannot run (or an unknown one)."""


def cpu_features() -> tuple[str, frozenset[str]]:
    """(machine, feature flags): x86 /proc/cpuinfo 'flags', ARM 'Features' (Linux)."""
    machine = platform.machine().lower()
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return machine, frozenset()
    for line in info.splitlines():
        if line.startswith(("flags", "Features")):
            return machine, frozenset(line.split(":", 1)[1].split())
    return machine, frozenset()


def _is_arm(machine: str) -> bool:
    return machine in ("aarch64", "arm64")


def best_level(machine: str, feats: frozenset[str]) -> str:
    """The highest level this CPU runs."""
    if _is_arm(machine):
        return "neon"
    for level in ("avx512", "avx2+vnni", "avx2"):
        if all(f in feats for f in X86_NEEDS[level]):
            return level
    return "scalar"


def resolve_level(requested: str | None, machine: str, feats: frozenset[str]) -> str:
    """LLAMAPY_CPU_ISA's value -> the level to build; IsaError when the CPU lacks it."""
    req = (requested or "native").strip().lower()
    if req not in LEVELS:
        raise IsaError(f"LLAMAPY_CPU_ISA={requested!r}: expected one of {', '.join(LEVELS)}")
    if req == "native":
        return best_level(machine, feats)
    if req == "scalar":
        return req
    if req == "neon":
        if not _is_arm(machine):
            raise IsaError(f"LLAMAPY_CPU_ISA=neon: this CPU is {machine}, not ARM64 (use native, avx2, avx512 or scalar)")
        return req
    if _is_arm(machine):
        raise IsaError(f"LLAMAPY_CPU_ISA={req}: this CPU is {machine} (use native, neon or scalar)")
    missing = [f for f in X86_NEEDS[req] if f not in feats]
    if missing:
        raise IsaError(f"LLAMAPY_CPU_ISA={req}: this CPU lacks {', '.join(missing)} "
                       f"(it runs {best_level(machine, feats)}; use native or a lower level)")
    return req


def kernel_level(level: str) -> str:
    """The kernels a build level runs: avx2+vnni is the avx2 level with VNNI's instruction."""
    return "avx2" if level == "avx2+vnni" else level


def level_flags(level: str, machine: str, feats: frozenset[str]) -> list[str]:
    """Compiler flags of a level on this CPU (the optional extensions it has)."""
    if level == "scalar":
        return ["-DLP_PORTABLE"] + ([] if _is_arm(machine) else ["-march=x86-64", "-mtune=generic"])
    if level == "avx2":
        return ["-march=x86-64-v3"]
    if level == "avx2+vnni":
        return ["-march=x86-64-v3", "-mavxvnni"]
    if level == "avx512":
        return ["-march=x86-64-v4"] + [flag for feat, flag in (("avx512_vnni", "-mavx512vnni"), ("avx512_bf16", "-mavx512bf16"),
                                                               ("amx_tile", "-mamx-tile"), ("amx_int8", "-mamx-int8"))
                                       if feat in feats]
    return ["-march=armv8.2-a+dotprod" if "asimddp" in feats else "-march=armv8-a"]


def sources() -> list[Path]:
    """The translation units the compiler is given (kernels/c/*.c)."""
    return sorted(SOURCE_DIR.glob("*.c"))


def source_files() -> list[Path]:
    """Every file the build reads: the translation units, the headers and the parts a unit
    includes whole (*.inc); a change in any of them is a new build (library_path's key)."""
    return sorted(p for p in SOURCE_DIR.iterdir() if p.suffix in (".c", ".h", ".inc"))


def compile_library(cc: str, flags: list[str], out: Path) -> None:
    """cc BASE_FLAGS flags sources -o out (atomically: a temp file renamed into place)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        cmd = [cc, *BASE_FLAGS, *flags, *map(str, sources()), "-o", tmp, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"{cc} failed ({r.returncode}): {r.stderr.strip()[-800:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _cache_root() -> Path:
    return Path(os.environ.get("LLAMAPY_CACHE", Path.home() / ".cache" / "llamapy")) / "kernels"


def library_path(cc: str, level: str, machine: str, feats: frozenset[str]) -> tuple[Path, list[str]]:
    """Where the build of `level` lives in the cache: keyed by the sources, the compiler, the
    flags and the CPU's features, so a cache shared between machines never hands one CPU's
    build to another."""
    flags = level_flags(level, machine, feats)
    h = hashlib.sha256(" ".join([cc, *BASE_FLAGS, *flags, machine, *sorted(feats)]).encode())
    for src in source_files():
        h.update(src.name.encode() + src.read_bytes())
    return _cache_root() / h.hexdigest()[:16] / f"libllamapy_{level}.so", flags


def _build(cc: str, level: str) -> Path:
    machine, feats = cpu_features()
    lib, flags = library_path(cc, level, machine, feats)
    if not lib.exists():
        log = logger("llamapy_kernels")
        log.info(f"building the CPU kernels for {level} ({cc} {' '.join(flags)}), once per machine: about ten seconds")
        t0 = time.perf_counter()
        compile_library(cc, flags, lib)
        log.info(f"built {lib} in {time.perf_counter() - t0:.1f} s")
    return lib


def system_info(lib: KernelLib | None, n_threads: int) -> str:
    """llama.cpp's system_info line for the level the kernels run at, e.g.
    `n_threads = 2 / 2 | CPU : ISA = avx2 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 0 | ...`."""
    head = f"n_threads = {n_threads} / {os.cpu_count()} | CPU : "
    if lib is None:
        why = "LLAMAPY_KERNELS=0" if os.environ.get("LLAMAPY_KERNELS", "1") == "0" else "no C compiler"
        return head + f"ISA = torch ({why}: PyTorch's kernels only) |"
    isa = lib.isa
    if lib.level in ("neon", "scalar") and _is_arm(cpu_features()[0]):
        flags = {"NEON": lib.level == "neon", "DOTPROD": "dotprod" in isa}
    else:
        avx512, v3 = lib.level == "avx512", lib.level in ("avx2", "avx512")
        flags = {"AVX_VNNI": isa == "avx2+vnni", "AVX2": v3, "F16C": v3, "FMA": v3, "AVX512": avx512,
                 "AVX512_VNNI": avx512 and "vnni" in isa, "AVX512_BF16": "bf16" in isa, "AMX_INT8": lib.amx}
    return head + f"ISA = {isa} | " + " | ".join(f"{k} = {int(v)}" for k, v in flags.items()) + " | OPENMP = 1 |"


def expected_level() -> str | None:
    """The level the kernels will be built for (LLAMAPY_CPU_ISA's, or the CPU's best), None
    when they are turned off or the requested level cannot run here.  Answered without
    building or loading anything (and without torch)."""
    if os.environ.get("LLAMAPY_KERNELS", "1") == "0":
        return None
    machine, feats = cpu_features()
    try:
        return kernel_level(resolve_level(requested_isa(), machine, feats))
    except IsaError:
        return None


def int8_rows_expected() -> bool:
    """Will the kernels lay out the AVX2 level's int8 activation rows (lanes8_x86.h LP_LANES8:
    x86-64-v3 without AVX-VNNI, the lanes8 and det8 x8 rows of the 32-value types)?  Answered
    like expected_level (nothing built or loaded); memory/moe_work.py's bound counts them only then."""
    if os.environ.get("LLAMAPY_KERNELS", "1") == "0":
        return False
    machine, feats = cpu_features()
    try:
        return resolve_level(requested_isa(), machine, feats) == "avx2"
    except IsaError:
        return False


def expected_library() -> Path | None:
    """Where load_kernels() finds (or builds) its library, None when the kernels are off or the
    level cannot run here; without building or loading anything (and without torch)."""
    if os.environ.get("LLAMAPY_KERNELS", "1") == "0":
        return None
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    machine, feats = cpu_features()
    try:
        level = resolve_level(requested_isa(), machine, feats)
    except IsaError:
        return None
    return library_path(cc, level, machine, feats)[0] if cc else None


def bf16_expected() -> bool:
    """Will the kernels run at a level that multiplies bf16 natively (avx512 with AVX512-BF16)?"""
    return expected_level() == "avx512" and "avx512_bf16" in cpu_features()[1]


def requested_isa() -> str | None:
    return os.environ.get("LLAMAPY_CPU_ISA")


def bind_signatures(fn: ctypes.CDLL) -> None:
    """The exported functions' argument and return types on a loaded kernel library."""
    for name, args in SIGNATURES.items():
        f = getattr(fn, name)
        f.argtypes, f.restype = list(args), None
    for name, res in RETURNS.items():
        getattr(fn, name).restype = res


@functools.lru_cache(maxsize=4)
def load_kernels(isa: str | None = None) -> KernelLib | None:
    """The kernel library for `isa` (default: $LLAMAPY_CPU_ISA, else native), built on first
    use; None (reason logged) when unavailable or turned off with LLAMAPY_KERNELS=0.  Raises
    IsaError when the level is forced and the CPU cannot run it."""
    log = logger("llamapy_kernels")
    if os.environ.get("LLAMAPY_KERNELS", "1") == "0":
        return None
    machine, feats = cpu_features()
    level = resolve_level(isa if isa is not None else requested_isa(), machine, feats)
    import torch  # noqa: F401  (its libgomp.so.1 must be loaded first, so ours resolves to it)

    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        log.warning("no C compiler (gcc/cc) found: the CPU kernels are off, PyTorch paths are used")
        return None
    try:
        path = _build(cc, level)
        fn = ctypes.CDLL(str(path))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        log.warning(f"CPU kernels unavailable, PyTorch paths are used: {e}")
        return None
    bind_signatures(fn)
    if fn.lp_abi_version() != ABI_VERSION:
        log.warning(f"{path}: ABI {fn.lp_abi_version()} != {ABI_VERSION}; the CPU kernels are off")
        return None
    lib = KernelLib(path, fn, kernel_level(level), fn.lp_isa().decode())
    from ..memory.heap import auto_tune_heap

    auto_tune_heap()  # the ubatches' buffers (and the timing below) reuse the heap, not fresh mappings
    if lib.bf16:
        lib = dataclasses.replace(lib, many_bf16=calibrate_coarse_bf16(lib).many)
    return lib
