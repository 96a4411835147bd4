"""User-facing parameters with llama.cpp's defaults (llama_context_default_params / common.h)."""
from __future__ import annotations

from dataclasses import dataclass

KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


@dataclass(slots=True)
class ContextParams:
    """What the caller asks for; resolve_cparams() turns it into what runs.

    n_ctx 0 means the model's trained context (n_ctx_train).  n_ubatch 0 means n_batch.
    kv_unified False gives each of the n_seq_max sequences its own stream of n_ctx/n_seq_max
    cells (llama.cpp's default outside the server); True shares one stream of n_ctx cells.
    """

    n_ctx: int = 0
    n_batch: int = 2048
    n_ubatch: int = 512
    n_seq_max: int = 1
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: str = "auto"  # on | off | auto
    kv_unified: bool = False
    swa_full: bool = False
    mem_budget_mib: float = 0.0  # n_ctx 0 is fitted under this (0: free memory minus a margin)
    n_threads: int = 0  # 0: leave torch's default
    device: str = "cpu"
    offload_kqv: bool = True  # False (-nkvo): a CUDA model's KV cache and attention stay in host memory
    deterministic: bool = False  # --deterministic: every row alone through the one-row path (docs/deterministic.md)
