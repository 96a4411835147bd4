"""Choices between two kernel paths that depend on the core, not on its feature flags, made by
timing both once and recording the result beside the library.

A CPU with AVX512-BF16 can multiply the coarse types (Q4_0, Q4_1, Q2_K, Q3_K: the types
kernels/types.py lets a bf16 GEMM take) in bf16, or take the integer products the other block
types take (int16 pairs in lanes, vpdpwssd).  Which is faster differs between cores that both
have the features, and with the row count, so two choices are timed:

  few rows (5 .. DENSE_ROWS - 1): bf16 tiles or the integer lanes, one 8-row Q4_1 product
      each way (kernels/c/mm.c lp_set_coarse_bf16; the flag is the loaded library's, one per
      process).  On a 2-core Intel Xeon (KVM, family 6 model 167) an 8-row SmolLM2 Q4_1
      verification took 33.8 ms in bf16 and 17.9 in integers.
  many rows (DENSE_ROWS and more: a prompt): a bf16 GEMM (PyTorch's, oneDNN: on a CPU with
      AMX its tiles) or the integer products in slices (model/block_matrix.py: the lanes, or on a
      CPU with AMX-INT8 its tiles, kernels/c/amx_x86.c), one MANY_ROWS-row
      product each way.  On the same Xeon the lanes ran SmolLM2's layer shapes at 512 rows in
      12.5 ms against 21.1 for the bf16 GEMM with oneDNN held to AVX512_CORE_BF16, while
      oneDNN's AMX kernels (its default there) ran its prompts 1.3-1.4x faster than the lanes.  The
      GEMM's speed depends on the ISA oneDNN may use (ONEDNN_MAX_CPU_ISA, read once when torch
      loads), so this choice is recorded per value of it.

Each takes the integers where they are clearly faster (MARGIN), else bf16, the default before
the timing existed, so a CPU where the two are close keeps its numerics.  The choices are
recorded beside the library (`<library>.coarse.json`; the library's path is keyed by the CPU's
features), so every later process takes the same ones without timing, and `llamapy mem`, which
loads no library, reports the buffers of the path a run will take.  LLAMAPY_COARSE_BF16=0|1
forces both.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..log import logger
from .lib import KernelLib

Q4_1 = 3  # GGML type id
N_OUT, N_IN, ROWS, REPS = 1536, 576, 8, 7  # an in-cache Q4_1 matrix (0.55 MB), a verification's rows
# Many rows: a default ubatch (-ub 512) of a prompt, about 1-3 ms a call, timed after MANY_WARM
# calls each way, at least MANY_MIN_REPS times and until the bf16 GEMM is as fast as the integers
# (then they cannot be MARGIN faster), at most MANY_REPS.  PyTorch's bf16 GEMM takes several calls
# to reach its speed (its thread pool, oneDNN's kernels), and under glibc's own heap thresholds it
# ran for stretches, or a whole process, at a third of it, its buffers mapped and page-faulted in
# afresh at every call (memory/heap.py, now set before this timing): on the 2-core Intel Xeon (KVM,
# family 6 model 167), 512 x 576 x 1536 in a fresh process, 6.1-8.9 ms first, then 2.1-2.4 ms for
# 2 to 40 calls, else 0.6-0.9 ms, while the integers on AMX ran 1.6-2.0 ms.  With one call first
# and the best of 3, one timing in three took the integers, which ran SmolLM2's pp512 at half the
# bf16 GEMMs' speed; with the heap set, 5 fresh processes timed 674-768 us against 1626-1745.
MANY_ROWS, MANY_MIN_REPS, MANY_REPS = 512, 4, 40
FEW_WARM, MANY_WARM = 1, 4
CALIBRATION = 2  # the timing's version, recorded with its choices: a record of an older timing is timed again
MARGIN = 1.25  # the integers are taken when they are this much faster (the two paths' sums differ slightly)


@dataclass(frozen=True, slots=True)
class CoarseChoice:
    """Whether a bf16 CPU's coarse types take bf16: few (5 .. DENSE_ROWS - 1 rows), many (more)."""

    few: bool
    many: bool


def _q4_1_blocks(n_out: int, n_in: int) -> np.ndarray:
    """Random Q4_1 rows: per block of 32, d = 1/64 and m = -1/8 as f16, then 16 bytes of nibbles."""
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, size=(n_out * n_in // 32, 20), dtype=np.uint8)
    blocks[:, 0:2] = np.frombuffer(np.float16(1 / 64).tobytes(), dtype=np.uint8)
    blocks[:, 2:4] = np.frombuffer(np.float16(-1 / 8).tobytes(), dtype=np.uint8)
    return np.ascontiguousarray(blocks)


def _few_seconds(lib: KernelLib, on: int, w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """One ROWS-row product with coarse_bf16 = on, timed."""
    lib.fn.lp_set_coarse_bf16(on)
    t0 = time.perf_counter()
    lib.fn.lp_mm(Q4_1, w.ctypes.data, N_OUT, N_IN, x.ctypes.data, ROWS, y.ctypes.data, N_OUT, 0)
    return time.perf_counter() - t0


def _many_seconds(lib: KernelLib, on: int, w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """One MANY_ROWS-row product, timed as model/block_matrix.py runs it: on, a bf16 GEMM (the
    weights dequantized to bf16, the activations converted, PyTorch's linear); else lp_mm's
    integers (the lanes, or AMX's tiles) in slices of lanes_slice_rows rows.  (Timed on one
    256-row slice against a 256-row GEMM, the integers on AMX won by 1.3x on a 2-core Intel Xeon
    (KVM, family 6 model 167) where SmolLM2's pp512 ran 1.6-1.8x faster in the bf16 GEMMs.)"""
    from .types import lanes_slice_rows

    import torch
    import torch.nn.functional as F

    t0 = time.perf_counter()
    if on:
        wb = torch.empty(N_OUT, N_IN, dtype=torch.bfloat16)
        lib.fn.lp_dequant_bf16(Q4_1, w.ctypes.data, N_IN, 0, N_OUT, wb.data_ptr())
        F.linear(torch.from_numpy(x).to(torch.bfloat16), wb).float()
    else:
        step = lanes_slice_rows(N_IN)
        for r in range(0, x.shape[0], step):
            n = min(step, x.shape[0] - r)
            lib.fn.lp_mm(Q4_1, w.ctypes.data, N_OUT, N_IN, x[r:].ctypes.data, n, y[r:].ctypes.data, N_OUT, 0)
    return time.perf_counter() - t0


def _timed(seconds: Callable[..., float], lib: KernelLib, rows: int, reps: int, warm: int,
           min_reps: int | None = None) -> tuple[bool, dict[int, float]]:
    """bf16 (True) unless the integers are MARGIN faster, with each path's best of `reps`
    alternating calls (a shared machine's drift hits both alike), after `warm` calls each;
    given min_reps, stopping after that many once bf16's best is no slower than the integers'."""
    w = _q4_1_blocks(N_OUT, N_IN)
    x = np.random.default_rng(1).standard_normal((rows, N_IN), dtype=np.float32)
    y = np.empty((rows, N_OUT), dtype=np.float32)
    best = {0: float("inf"), 1: float("inf")}
    for _ in range(warm):  # first calls: oneDNN builds its kernel, threads start, pages are touched
        for on in (1, 0):
            seconds(lib, on, w, x, y)
    for i in range(reps):
        for on in (1, 0):
            best[on] = min(best[on], seconds(lib, on, w, x, y))
        if min_reps is not None and i + 1 >= min_reps and best[1] <= best[0]:
            break
    return best[0] * MARGIN >= best[1], best


def record_path(library: Path) -> Path:
    """Where the choices for the library at `library` are recorded."""
    return library.with_name(library.name + ".coarse.json")


def onednn_key() -> str:
    """The many-row choice's key: the ISA cap oneDNN runs under (its two spellings), and
    LLAMAPY_AMX=0 where it keeps the integers off AMX's tiles (kernels/c/amx_x86.c)."""
    key = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL"
    return key + (" LLAMAPY_AMX=0" if os.environ.get("LLAMAPY_AMX", "").startswith("0") else "")


def forced_coarse_bf16() -> bool | None:
    """LLAMAPY_COARSE_BF16's choice, None when it does not force one."""
    forced = os.environ.get("LLAMAPY_COARSE_BF16")
    return forced == "1" if forced in ("0", "1") else None


def _read(library: Path) -> dict:
    try:
        rec = json.loads(record_path(library).read_text())
        return rec if isinstance(rec, dict) else {}
    except (OSError, ValueError):
        return {}


def recorded_choice(library: Path) -> CoarseChoice | None:
    """The choices recorded for this library (the many-row one under this process's oneDNN
    key), None when either is missing or the record unreadable."""
    rec = _read(library)
    if rec.get("v") != CALIBRATION:
        return None
    few, many = rec.get("few"), rec.get("many", {})
    if few not in (0, 1) or not isinstance(many, dict) or many.get(onednn_key()) not in (0, 1):
        return None
    return CoarseChoice(bool(few), bool(many[onednn_key()]))


def calibrate_coarse_bf16(lib: KernelLib) -> CoarseChoice:
    """Set the library's coarse_bf16 (few rows) and return both choices: LLAMAPY_COARSE_BF16's,
    else the recorded ones, else timed now (60-90 ms on a 2-core Intel Xeon, native level; at most ~230) and recorded."""
    forced = forced_coarse_bf16()
    choice = CoarseChoice(forced, forced) if forced is not None else recorded_choice(lib.path)
    if choice is None:
        few, few_t = _timed(_few_seconds, lib, ROWS, REPS, FEW_WARM)
        many, many_t = _timed(_many_seconds, lib, MANY_ROWS, MANY_REPS, MANY_WARM, MANY_MIN_REPS)
        choice = CoarseChoice(few, many)
        logger("llamapy_kernels").info(
            f"Q4_1 products of {ROWS} rows {few_t[1] * 1e6:.0f} us in bf16, {few_t[0] * 1e6:.0f} us in integers; "
            f"of {MANY_ROWS} rows {many_t[1] * 1e6:.0f} us in a bf16 GEMM, {many_t[0] * 1e6:.0f} us in integers: "
            f"the coarse types take {'bf16' if few else 'integers'} from 5 rows, "
            f"{'bf16 GEMMs' if many else 'integers'} from 128 (recorded in {record_path(lib.path)})")
        _record(lib.path, choice)
    lib.fn.lp_set_coarse_bf16(int(choice.few))
    return choice


def _record(library: Path, choice: CoarseChoice) -> None:
    """Write the choices beside the library (the many-row one under this process's oneDNN key,
    beside other keys' of the same CALIBRATION), atomically: a concurrent process writes the
    same kind of file, the last one stays.  A read-only cache only costs later processes a
    timing."""
    rec = _read(library)
    many = rec.get("many") if isinstance(rec.get("many"), dict) and rec.get("v") == CALIBRATION else {}
    path = record_path(library)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"v": CALIBRATION, "few": int(choice.few), "many": {**many, onednn_key(): int(choice.many)}}))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
