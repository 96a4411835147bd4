"""LLM_ARCH_PHI3 (llama.cpp src/models/phi3.cpp): the llama layer with Q, K and V in one fused
tensor, attn_qkv.weight [n_embd, n_embd + 2 n_embd_gqa] (Q | K | V rows: the product's layout
archs/llama.py already uses), and gate and up in one, ffn_up.weight [n_embd, 2 n_ff] (gate |
up: ggml_swiglu's halves, LLM_FFN_SWIGLU + LLM_FFN_SEQ with no ffn_gate); RoPE NEOX; scale
1/sqrt(head size); tied or separate output.  Everything else, the fused C layer included, is
archs/llama.py's.

Not implemented, refused by name at load (model/arch_tensors.py, arch_keys.py): LongRoPE
(rope_factors_long/short.weight, rope.scaling.type longrope), separate attn_q/k/v tensors.  A
file's {arch}.attention.sliding_window is read and, as llama.cpp does (llama_model_phi3::
load_arch_hparams: "Phi SWA is currently disabled"), not applied: hparams.py sets n_swa 0."""
from __future__ import annotations

from ..loader import WeightLoader
from ..rope import ROPE_TYPE_NEOX
from .llama import LlamaLayer, LlamaModel


class Phi3Model(LlamaModel):
    arch_name = "phi3"
    rope_type = ROPE_TYPE_NEOX

    @staticmethod
    def _load_layer(w: WeightLoader, il: int) -> LlamaLayer:
        p = f"blk.{il}."
        return LlamaLayer(
            attn_norm=w.get(p + "attn_norm.weight"),
            wqkv=w.matrix(p + "attn_qkv.weight"),
            wo=w.matrix(p + "attn_output.weight"),
            ffn_norm=w.get(p + "ffn_norm.weight"),
            ffn_gate_up=w.matrix(p + "ffn_up.weight"),  # [2 n_ff, n_embd]: gate | up
            ffn_down=w.matrix(p + "ffn_down.weight"),
        )
