"""resolve_cparams(): llama.cpp's clamps and padding turning ContextParams into the values
that run.  Unlike llama.cpp, every clamp that changes what the user asked for is logged as
a warning naming both numbers."""
from __future__ import annotations

import os
from dataclasses import dataclass

from .log import logger
from .model.hparams import HParams
from .params import ContextParams

N_CTX_PAD = 256


@dataclass(frozen=True, slots=True)
class CParams:
    n_ctx: int  # total KV cells
    n_ctx_seq: int  # cells one sequence can use
    n_batch: int
    n_ubatch: int
    n_seq_max: int
    kv_unified: bool
    type_k: str
    type_v: str
    flash_attn: str
    swa_full: bool
    causal_attn: bool = True
    offload_kqv: bool = True  # the KV cache lives with the weights (False: -nkvo on CUDA, host memory)
    deterministic: bool = False  # --deterministic / LLAMAPY_DETERMINISTIC=1: one-row ubatches (docs/deterministic.md)

    @property
    def n_stream(self) -> int:
        return 1 if self.kv_unified else self.n_seq_max


def pad(x: int, n: int) -> int:
    return -(-x // n) * n


def resolve_cparams(p: ContextParams, hp: HParams, n_ctx_fitted: int | None = None) -> CParams:
    """Apply llama.cpp's rules; raise ValueError (naming the flag) for values that cannot work."""
    log = logger("llama_context")
    for name, v in (("n_batch (-b)", p.n_batch), ("n_ubatch (-ub)", p.n_ubatch), ("n_seq_max (-np)", p.n_seq_max)):
        if v < 0 or (v == 0 and name.startswith("n_seq")) or (v == 0 and name.startswith("n_batch")):
            raise ValueError(f"{name} must be positive, got {v}")
    if p.n_ctx < 0:
        raise ValueError(f"n_ctx (-c) must be >= 0 (0 = the trained context), got {p.n_ctx}")
    if p.flash_attn not in ("on", "off", "auto"):
        raise ValueError(f"flash_attn (-fa) must be on, off or auto, got '{p.flash_attn}'")
    n_ctx = p.n_ctx if p.n_ctx > 0 else (n_ctx_fitted or hp.n_ctx_train)
    n_ctx_padded = pad(n_ctx, N_CTX_PAD)
    if n_ctx_padded != n_ctx and p.n_ctx > 0:
        log.warning(f"n_ctx ({n_ctx}) padded up to {n_ctx_padded}, a multiple of {N_CTX_PAD}")
    n_ctx = n_ctx_padded
    if not p.kv_unified:  # each stream a multiple of 256 cells (llama_context: n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256))
        n_seq_cells = pad(n_ctx // p.n_seq_max, N_CTX_PAD)
        if n_seq_cells == 0:
            raise ValueError(f"n_ctx ({n_ctx}) < n_seq_max (-np {p.n_seq_max}): no cells for a stream; raise -c or lower -np")
        if n_seq_cells * p.n_seq_max != n_ctx:
            n_new = n_seq_cells * p.n_seq_max
            log.warning(f"n_ctx ({n_ctx}) / n_seq_max ({p.n_seq_max}) is not a multiple of {N_CTX_PAD}: n_ctx set to {n_new} "
                        f"so each stream holds {n_seq_cells} cells")
            n_ctx = n_new
    n_batch = min(n_ctx, p.n_batch)
    if n_batch != p.n_batch:
        log.warning(f"n_batch (-b {p.n_batch}) > n_ctx ({n_ctx}): n_batch clamped to {n_batch}")
    want_ub = p.n_ubatch if p.n_ubatch > 0 else n_batch
    n_ubatch = min(n_batch, want_ub)
    if n_ubatch != want_ub:
        log.warning(f"-b {n_batch} < -ub {want_ub}: micro-batch clamped to {n_ubatch}")
    n_ctx_seq = n_ctx if p.kv_unified else n_ctx // p.n_seq_max
    return CParams(
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        n_seq_max=p.n_seq_max,
        kv_unified=p.kv_unified,
        type_k=p.type_k,
        type_v=p.type_v,
        flash_attn=p.flash_attn,
        swa_full=p.swa_full,
        causal_attn=hp.causal_attn,
        offload_kqv=p.offload_kqv or not str(p.device).startswith("cuda"),  # on the CPU, host memory either way
        deterministic=p.deterministic or os.environ.get("LLAMAPY_DETERMINISTIC", "0") not in ("", "0"),
    )


def log_cparams(c: CParams, hp: HParams) -> None:
    log = logger("llama_context")
    log.info(f"n_seq_max             = {c.n_seq_max}")
    log.info(f"n_ctx                 = {c.n_ctx}")
    log.info(f"n_ctx_seq             = {c.n_ctx_seq}")
    log.info(f"n_batch               = {c.n_batch}")
    log.info(f"n_ubatch              = {c.n_ubatch}")
    log.info(f"causal_attn           = {int(c.causal_attn)}")
    log.info(f"flash_attn            = {c.flash_attn}")
    log.info(f"kv_unified            = {'true' if c.kv_unified else 'false'}")
    if c.deterministic:
        log.info("deterministic         = true (every row its own ubatch: the one-row kernels)")
    log.info(f"freq_base             = {hp.rope_freq_base:.1f}")
    log.info(f"freq_scale            = {hp.rope_freq_scale:g}")
    if c.n_ctx_seq < hp.n_ctx_train:
        log.warning(f"n_ctx_seq ({c.n_ctx_seq}) < n_ctx_train ({hp.n_ctx_train}) -- the full capacity of the model will not be utilized")
    elif c.n_ctx_seq > hp.n_ctx_train:
        log.warning(f"n_ctx_seq ({c.n_ctx_seq}) > n_ctx_train ({hp.n_ctx_train}) -- possible training context overflow")
