"""LLM_ARCH_QWEN2 (llama.cpp src/models/qwen2.cpp): the llama layer with biases on Q, K and V
(optional, as llama_model_base::create_tensor_qkv reads them; every Qwen2 has them) and RoPE
NEOX (halves); tied or separate output.  Everything else is archs/llama.py's.

With biases the layers take the per-op path only: the fused C layer adds none."""
from __future__ import annotations

from ..rope import ROPE_TYPE_NEOX
from .llama import LlamaModel


class Qwen2Model(LlamaModel):
    arch_name = "qwen2"
    rope_type = ROPE_TYPE_NEOX
