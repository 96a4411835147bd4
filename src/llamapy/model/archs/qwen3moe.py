"""LLM_ARCH_QWEN3MOE (llama.cpp src/models/qwen3moe.cpp): Qwen 3's attention (per-head Q/K
RMSNorm before RoPE NEOX, archs/qwen3.py) with the mixture-of-experts FFN of model/moe.py in
every layer: ffn_gate_inp [n_embd, n_expert], ffn_{gate,up}_exps [n_embd, n_ff_exp, n_expert],
ffn_down_exps [n_ff_exp, n_embd, n_expert]; n_ff_exp from {arch}.expert_feed_forward_length,
softmax gating, the top expert_used_count weights renormalised.  A one-row ubatch (decode) takes
the fused C layers with the experts (kernels/fused_layers.py, kernels/c/moe.c lp_moe_row_for)."""
from __future__ import annotations

from .qwen3 import Qwen3Model


class Qwen3MoeModel(Qwen3Model):
    arch_name = "qwen3moe"
