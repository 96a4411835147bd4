"""LLM_ARCH_NOMIC_BERT (llama.cpp's models/nomic-bert.cpp, which uses bert's graph): bert
(archs/bert.py) with no learned positions but RoPE NEOX on Q and K (rope.freq_base,
rope.dimension_count), Q|K|V fused in attn_qkv, and a SwiGLU FFN without biases
(ffn_down(silu(ffn_gate x) * ffn_up x)); token types, LayerNorms with biases, non-causal."""
from __future__ import annotations

import torch

from ..loader import WeightLoader
from ..qmatrix import QMatrix
from ..rope import ROPE_TYPE_NEOX, RopeParams
from .bert import BertModel


class NomicBertModel(BertModel):
    arch_name = "nomic-bert"
    rope_type = ROPE_TYPE_NEOX

    def _load_positions(self, w: WeightLoader) -> None:
        hp = self.hp
        self.rope = RopeParams(hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale, self.rope_type)

    def _load_attn(self, w: WeightLoader, p: str) -> tuple[QMatrix, torch.Tensor | None]:
        b = p + "attn_qkv.bias"
        return w.matrix(p + "attn_qkv.weight"), (w.get(b) if w.has(b) else None)

    def _load_ffn(self, w: WeightLoader, p: str) -> tuple[QMatrix, bool]:
        return w.matrix(p + "ffn_gate.weight", p + "ffn_up.weight"), True
