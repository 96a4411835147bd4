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
from .gemma3 import Gemma3Layer, Gemma3Model


class Gemma2Model(Gemma3Model):
    arch_name = "gemma2"
    n_layer_27b = 46
    final_softcap_default = 30.0  # llama_hparams::f_final_logit_softcapping
    attn_softcap_default = 50.0  # llama_hparams::f_attn_logit_softcapping (attn_soft_cap = true)
    swa_rope_scaled = True

    def _fused(self, w: WeightLoader) -> FusedLayers | None:
        return None  # the C layer does not soft-cap the attention scores

    @staticmethod
    def _load_layer(w: WeightLoader, il: int) -> Gemma3Layer:
        p = f"blk.{il}."
        return Gemma3Layer(
            attn_norm=w.get(p + "attn_norm.weight"),
            wqkv=w.matrix(p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"),
            wo=w.matrix(p + "attn_output.weight"),
            attn_q_norm=None,
            attn_k_norm=None,
            attn_post_norm=w.get(p + "post_attention_norm.weight"),
            ffn_norm=w.get(p + "ffn_norm.weight"),
            ffn_gate=w.matrix(p + "ffn_gate.weight"),
            ffn_up=w.matrix(p + "ffn_up.weight"),
            ffn_down=w.matrix(p + "ffn_down.weight"),
            ffn_post_norm=w.get(p + "post_ffw_norm.weight"),
        )
