"""LLM_ARCH_PHI3 (llama.cpp src/models/phi3.cpp): the llama layer with Q, K and V in one fused
tensor, attn_qkv.weight [n_embd, n_embd + 2 n_embd_gqa] (Q | K | V rows: the product's layout
archs/llama.py already uses), and gate and up in one, ffn_up.weight [n_embd, 2 n_ff] (gate |
up: ggml_swiglu's halves, LLM_FFN_SWIGLU + LLM_FFN_SEQ with no ffn_gate); RoPE NEOX; scale
1/sqrt(head size); tied or separate output.  Everything else, the fused C layer included, is
archs/llama.py's.

LongRoPE (Phi-3/3.5 128k, Phi-4-mini): rope_factors_long.weight and rope_factors_short.weight
[n_rot/2], one set for every layer.  llama_model::get_rope_factors picks the long factors when a
sequence's cells (n_ctx_seq) exceed rope.scaling.original_context_length (n_ctx_orig_yarn), else
the short ones, for every position: the choice is the context's, not the position's.  And
rope.scaling.attn_factor multiplies cos and sin whichever set is chosen (llama_context:
yarn_attn_factor *= rope_attn_factor; ggml_rope_ext's mscale).

Not implemented, refused by name at load (model/arch_tensors.py, arch_keys.py): rope.scaling.type
(llama.cpp's converter does not write it for Phi-3), separate attn_q/k/v tensors.  A file's
{arch}.attention.sliding_window is read and, as llama.cpp does (llama_model_phi3::
load_arch_hparams: "Phi SWA is currently disabled"), not applied: hparams.py sets n_swa 0."""
from __future__ import annotations

from dataclasses import replace

from ..block_matrix import glu_input
from ..hparams import HParams
from ..loader import WeightLoader
from ..rope import ROPE_TYPE_NEOX, RopeParams
from ..stage import StageLayers
from .llama import LlamaLayer, LlamaModel


class Phi3Model(LlamaModel):
    arch_name = "phi3"
    rope_type = ROPE_TYPE_NEOX

    def __init__(self, hp: HParams, w: WeightLoader, stage: StageLayers | None = None) -> None:
        super().__init__(hp, w, stage)
        base = replace(self.rope, attn_factor=hp.yarn_attn_factor)  # rope.scaling.attn_factor (hparams._yarn)
        self.rope_short = replace(base, freq_factors=_factors(w, "rope_factors_short.weight"))
        self.rope_long = replace(base, freq_factors=_factors(w, "rope_factors_long.weight"))
        self.rope = self.rope_short  # what rope_for_ctx gives up to n_ctx_orig_yarn cells

    def rope_for_ctx(self, n_ctx_seq: int) -> RopeParams:
        return self.rope_long if n_ctx_seq > self.hp.n_ctx_orig_yarn else self.rope_short

    @staticmethod
    def _load_layer(w: WeightLoader, il: int) -> LlamaLayer:
        p = f"blk.{il}."
        return LlamaLayer(
            attn_norm=w.get(p + "attn_norm.weight"),
            wqkv=w.matrix(p + "attn_qkv.weight"),
            wo=w.matrix(p + "attn_output.weight"),
            ffn_norm=w.get(p + "ffn_norm.weight"),
            ffn_gate_up=w.matrix(p + "ffn_up.weight"),  # [2 n_ff, n_embd]: gate | up
            ffn_down=glu_input(w.matrix(p + "ffn_down.weight")),  # SwiGLU rows: Q8_K, as the fused layers
        )


def _factors(w: WeightLoader, name: str) -> tuple[float, ...] | None:
    """A LongRoPE factor set [n_rot/2], or None where the file lacks it (llama.cpp: no factors)."""
    return tuple(float(x) for x in w.get(name).cpu()) if w.has(name) else None
