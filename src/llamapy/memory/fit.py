"""Fitting the context to a memory budget (llama.cpp's common_params_fit, made explicit).

n_ctx = 0 means the trained context reduced, in steps of 256, until weights + KV + compute +
output fit the budget, never below 4096 (the fitter's floor, not a default).  An explicit
-c is never fitted: if it does not fit, MemoryBudgetError names every number before anything
is allocated.  The budget defaults to the device's free memory minus a 1024 MiB margin."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

from ..log import logger
from ..params import ContextParams
from .estimate import MiB, MemoryEstimate, ModelInfo, estimate_memory

N_CTX_STEP = 256
N_CTX_MIN_FIT = 4096  # the fitter's floor
MARGIN = 1024 * MiB  # llama.cpp's default --fit-target


class MemoryBudgetError(ValueError):
    """The requested context does not fit the memory budget; the message has the numbers."""


@dataclass(frozen=True, slots=True)
class FitResult:
    n_ctx: int  # the n_ctx to run with (resolved: padded, a multiple of the streams)
    n_ctx_train: int
    budget: int  # bytes
    estimate: MemoryEstimate
    reduced: bool  # the fitter lowered n_ctx below the trained context


def free_memory(device: str = "cpu") -> int:
    """Bytes free on `device` now: cudaMemGetInfo for CUDA, MemAvailable for the CPU."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:  # Linux: the kernel's own estimate of what can be allocated without swapping
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")  # free pages elsewhere


def default_budget(device: str = "cpu") -> int:
    return max(0, free_memory(device) - MARGIN)


def breakdown(e: MemoryEstimate) -> str:
    if not e.cparams.offload_kqv:  # -nkvo: the KV cache is host memory, outside the device's budget
        return (f"weights {e.weights / MiB:.2f} MiB + compute {e.compute / MiB:.2f} MiB + output {e.output / MiB:.2f} MiB"
                f" = {e.device_total / MiB:.2f} MiB on the device (KV {e.kv / MiB:.2f} MiB in host memory, -nkvo)")
    return (
        f"weights {e.weights / MiB:.2f} MiB + KV {e.kv / MiB:.2f} MiB + compute {e.compute / MiB:.2f} MiB"
        f" + output {e.output / MiB:.2f} MiB = {e.total / MiB:.2f} MiB"
    )


@contextlib.contextmanager
def _quiet():
    """Silence resolve_cparams' clamp warnings while the fitter tries candidate contexts."""
    log = logger("llama_context")
    was = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = was


def _est(info: ModelInfo, p: ContextParams, n_ctx: int, n_outputs: int | None) -> MemoryEstimate:
    with _quiet():
        return estimate_memory(info, replace(p, n_ctx=n_ctx), n_outputs)


def largest_fitting_ctx(info: ModelInfo, p: ContextParams, budget: int, lo: int = N_CTX_STEP, hi: int | None = None, n_outputs: int | None = None) -> int:
    """Largest n_ctx in [lo, hi] (multiples of 256; hi defaults to n_ctx_train) whose estimate
    fits `budget`, as the resolved n_ctx; 0 if not even `lo` fits.  Binary search: every
    buffer grows monotonically with n_ctx."""
    hi = info.hparams.n_ctx_train if hi is None else hi
    n = largest_step(lo, hi, lambda n: _est(info, p, n, n_outputs).device_total <= budget)
    return _est(info, p, n, n_outputs).cparams.n_ctx if n else 0


def largest_step(lo: int, hi: int, fits) -> int:
    """The largest multiple of N_CTX_STEP in [lo, hi] for which fits(n_ctx) holds, 0 if none
    (not even the first).  Binary search: fits must hold below any n_ctx where it holds."""
    k_lo, k_hi = -(-lo // N_CTX_STEP), hi // N_CTX_STEP
    if k_hi < k_lo or not fits(k_lo * N_CTX_STEP):
        return 0
    while k_lo < k_hi:
        mid = (k_lo + k_hi + 1) // 2
        if fits(mid * N_CTX_STEP):
            k_lo = mid
        else:
            k_hi = mid - 1
    return k_lo * N_CTX_STEP


def fit_ctx(info: ModelInfo, p: ContextParams, budget: int | None = None, n_outputs: int | None = None) -> FitResult:
    """The n_ctx to create the context with under `budget` bytes (default: free memory minus
    1024 MiB).  p.n_ctx > 0 is checked, never changed; p.n_ctx == 0 starts at n_ctx_train and
    is reduced in steps of 256 down to 4096 at most.  Raises MemoryBudgetError with the
    numbers when nothing allowed fits."""
    log = logger("llama_params_fit")
    budget = default_budget(p.device) if budget is None else budget
    n_train = info.hparams.n_ctx_train
    if p.n_ctx > 0:
        e = _est(info, p, p.n_ctx, n_outputs)
        if e.device_total > budget:
            raise MemoryBudgetError(
                f"-c {p.n_ctx} needs {breakdown(e)} but the memory budget is {budget / MiB:.2f} MiB; "
                f"lower -c/--ctx-size, quantize the cache (-ctk q8_0 -ctv q8_0), lower -np/-ub, or raise --mem-budget"
            )
        return FitResult(e.cparams.n_ctx, n_train, budget, e, False)
    e = _est(info, p, n_train, n_outputs)
    if e.device_total <= budget:
        return FitResult(e.cparams.n_ctx, n_train, budget, e, False)
    floor = min(N_CTX_MIN_FIT, n_train)
    n = largest_fitting_ctx(info, p, budget, lo=floor, hi=n_train, n_outputs=n_outputs)
    if n == 0:
        e_floor = _est(info, p, floor, n_outputs)
        raise MemoryBudgetError(
            f"the trained context ({n_train}) needs {breakdown(e)}, and even the fitter's floor of {floor} "
            f"needs {breakdown(e_floor)}, over the memory budget of {budget / MiB:.2f} MiB; "
            f"set a smaller -c explicitly, quantize the cache (-ctk q8_0 -ctv q8_0), or raise --mem-budget"
        )
    e_fit = _est(info, p, n, n_outputs)
    log.warning(
        f"context size reduced from {n_train} to {n}: the trained context needs {breakdown(e)}, "
        f"over the memory budget of {budget / MiB:.2f} MiB; {n} needs {e_fit.device_total / MiB:.2f} MiB "
        f"(set -c to choose, --mem-budget to change the budget)"
    )
    return FitResult(n, n_train, budget, e_fit, True)
