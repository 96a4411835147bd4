"""LLM_ARCH_GEMMA2 (llama.cpp src/models/gemma2.cpp, graph<iswa>): archs/gemma3.py's layer
without the per-head Q/K norms: embeddings scaled by sqrt(n_embd); RMSNorm -> Q/K/V -> RoPE
NEOX -> Q scaled by f_attention_scale (1/sqrt(head size); 1/sqrt(n_embd / n_head) for the 27B,
46 layers) -> attention whose scaled scores are soft-capped, tanh(kq / c) * c with c =
{arch}.attn_logit_softcapping (default 50), before the mask -> post-attention RMSNorm +
residual -> RMSNorm -> GELU(tanh)-gated FFN -> post-FFN RMSNorm + residual; output RMSNorm;
output tied to token_embd (llama.cpp reads no output.weight); final logits soft-capped by
{arch}.final_logit_softcapping (default 30).

Sliding window (hparams.py): {arch}.attention.sliding_window (default 4096) on the even layers
(set_swa_pattern(2)), or as {arch}.attention.sliding_window_pattern says; the window layers'
RoPE is the global one unless the file sets rope.freq_base_swa.  The cache is Gemma 3's iSWA
pair (memory/iswa.py).

Norm weights are used as stored (the converter added Gemma's `1 +`).  The fused C layer has no
soft-capping: every ubatch takes the per-op path (fused is None), attention through the
materialized KQ (model/attend.py)."""
from __future__ import annotations

from ...kernels.fused_layers import FusedLayers
from ..loader import WeightLoader
from .gemma3 import Gemma3Model


class Gemma2Model(Gemma3Model):
    arch_name = "gemma2"
    n_layer_27b = 46
    final_softcap_default = 30.0  # llama_hparams::f_final_logit_softcapping
    attn_softcap_default = 50.0  # llama_hparams::f_attn_logit_softcapping (attn_soft_cap = true)
    swa_rope_scaled = True
    has_qk_norm = False

    def _fused(self, w: WeightLoader) -> FusedLayers | None:
        return None  # the C layer does not soft-cap the attention scores
