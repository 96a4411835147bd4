"""Choices between two kernel paths that depend on the core, not on its feature flags, made by
timing both once when the library is loaded.

A CPU with AVX512-BF16 can multiply the coarse types (Q4_0, Q4_1, Q2_K, Q3_K: the types
kernels/types.py lets a bf16 GEMM take) in bf16 from 5 rows on, or take the integer products
the other block types take (twin lanes of int16 pairs, vpdpwssd).  Which is faster differs
between cores that both have the features: on a 2-core Intel Xeon (KVM, family 6 model 167) an
8-row SmolLM2 Q4_1 verification took 33.8 ms in bf16 and 17.9 in integers.  So the library
times one 8-row Q4_1 product both ways and takes the integers where they are clearly faster,
else bf16 (kernels/c/mm.c lp_set_coarse_bf16; the flag is the loaded library's, one per
process), at every row count: a few rows in the tiles or the twin lanes, DENSE_ROWS and more
in a bf16 GEMM or the lanes (kernels/types.py bf16_gemm).  The choice is recorded beside the
library (`<library>.coarse.json`; the library's path is keyed by the CPU's features), so every
later process takes the same one without timing, and `llamapy mem`, which loads no library,
reports the buffers of the path a run will take.  LLAMAPY_COARSE_BF16=0|1 forces the choice.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..log import logger

if TYPE_CHECKING:
    from .build import KernelLib

Q4_1 = 3  # GGML type id
N_OUT, N_IN, ROWS, REPS = 1536, 576, 8, 7  # an in-cache Q4_1 matrix (0.55 MB), a verification's rows
MARGIN = 1.25  # the integers are taken when they are this much faster (the two paths' sums differ slightly)


def _q4_1_blocks(n_out: int, n_in: int) -> np.ndarray:
    """Random Q4_1 rows: per block of 32, d = 1/64 and m = -1/8 as f16, then 16 bytes of nibbles."""
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, size=(n_out * n_in // 32, 20), dtype=np.uint8)
    blocks[:, 0:2] = np.frombuffer(np.float16(1 / 64).tobytes(), dtype=np.uint8)
    blocks[:, 2:4] = np.frombuffer(np.float16(-1 / 8).tobytes(), dtype=np.uint8)
    return np.ascontiguousarray(blocks)


def _seconds(lib: KernelLib, on: int, w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """One ROWS-row product with coarse_bf16 = on, timed."""
    lib.fn.lp_set_coarse_bf16(on)
    t0 = time.perf_counter()
    lib.fn.lp_mm(Q4_1, w.ctypes.data, N_OUT, N_IN, x.ctypes.data, ROWS, y.ctypes.data, N_OUT, 0)
    return time.perf_counter() - t0


def record_path(library: Path) -> Path:
    """Where the choice for the library at `library` is recorded."""
    return library.with_name(library.name + ".coarse.json")


def forced_coarse_bf16() -> bool | None:
    """LLAMAPY_COARSE_BF16's choice, None when it does not force one."""
    forced = os.environ.get("LLAMAPY_COARSE_BF16")
    return forced == "1" if forced in ("0", "1") else None


def recorded_coarse_bf16(library: Path) -> bool | None:
    """The choice a process recorded for this library, None when none has (or it is unreadable)."""
    try:
        return bool(json.loads(record_path(library).read_text())["coarse_bf16"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def calibrate_coarse_bf16(lib: KernelLib) -> bool:
    """Set the library's coarse_bf16 to the faster path and return it: LLAMAPY_COARSE_BF16's,
    else the recorded choice, else timed now and recorded.  The two paths' calls alternate, and
    each keeps its best of REPS, so a shared machine's drift hits both alike; the whole timing
    takes a few milliseconds."""
    on = forced_coarse_bf16()
    if on is None:
        on = recorded_coarse_bf16(lib.path)
    if on is not None:
        lib.fn.lp_set_coarse_bf16(int(on))
        return on
    w = _q4_1_blocks(N_OUT, N_IN)
    x = np.random.default_rng(1).standard_normal((ROWS, N_IN), dtype=np.float32)
    y = np.empty((ROWS, N_OUT), dtype=np.float32)
    best = {0: float("inf"), 1: float("inf")}
    for _ in range(REPS):
        for on in (1, 0):
            best[on] = min(best[on], _seconds(lib, on, w, x, y))
    on = best[0] * MARGIN >= best[1]  # bf16 unless the integers are clearly faster
    lib.fn.lp_set_coarse_bf16(int(on))
    logger("llamapy_kernels").info(f"{ROWS}-row Q4_1 products {best[1] * 1e6:.0f} us in bf16, {best[0] * 1e6:.0f} us "
                                   f"in integers: the coarse types take {'bf16' if on else 'integers'} from 5 rows "
                                   f"(recorded in {record_path(lib.path)})")
    _record(lib.path, on, best)
    return on


def _record(library: Path, on: bool, best: dict[int, float]) -> None:
    """Write the choice beside the library, atomically (a concurrent process writes the same
    kind of file; the last one stays).  A read-only cache only costs later processes a timing."""
    path = record_path(library)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"coarse_bf16": int(on), "bf16_us": round(best[1] * 1e6, 1),
                                   "integers_us": round(best[0] * 1e6, 1)}))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
