"""LLM_ARCH_QWEN3 (llama.cpp src/models/qwen3.cpp): the llama layer with a per-head RMSNorm of Q
and of K before RoPE (attn_q_norm, attn_k_norm [n_embd_head_k], eps {arch}.attention.
layer_norm_rms_epsilon), RoPE NEOX (halves), a head size from attention.key_length that need
not be n_embd / n_head, scale 1/sqrt(head size); tied or separate output.  Everything else is
archs/llama.py's, including the fused C layer for few-row ubatches (it applies the norms).
Qwen3-Reranker: an optional cls.output [n_cls_out, n_embd] (the converter's lm_head rows of
"yes" and "no"); rank pooling reads the last token through it and softmaxes (build_pooling),
the score being the first output's probability."""
from __future__ import annotations

from ..hparams import HParams
from ..loader import WeightLoader
from ..rope import ROPE_TYPE_NEOX
from ..stage import StageLayers
from .bert import ClsHead
from .llama import LlamaModel


class Qwen3Model(LlamaModel):
    arch_name = "qwen3"
    rope_type = ROPE_TYPE_NEOX

    def __init__(self, hp: HParams, w: WeightLoader, stage: StageLayers | None = None) -> None:
        super().__init__(hp, w, stage)
        has = self.stage.last and w.has("cls.output.weight")
        self.head = ClsHead(None, None, w.matrix("cls.output.weight"), None, softmax=True) if has else None
