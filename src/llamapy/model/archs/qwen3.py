"""LLM_ARCH_QWEN3 (llama.cpp src/models/qwen3.cpp): the llama layer with a per-head RMSNorm of Q
and of K before RoPE (attn_q_norm, attn_k_norm [n_embd_head_k], eps {arch}.attention.
layer_norm_rms_epsilon), RoPE NEOX (halves), a head size from attention.key_length that need
not be n_embd / n_head, scale 1/sqrt(head size); tied or separate output.  Everything else is
archs/llama.py's, including the fused C layer for few-row ubatches (it applies the norms)."""
from __future__ import annotations

from ..rope import ROPE_TYPE_NEOX
from .llama import LlamaModel


class Qwen3Model(LlamaModel):
    arch_name = "qwen3"
    rope_type = ROPE_TYPE_NEOX
