"""LLM_ARCH_GEMMA3 (llama.cpp src/models/gemma3.cpp, graph<iswa>): embeddings scaled by
sqrt(n_embd); per layer RMSNorm -> Q/K/V -> per-head RMSNorm of Q and K -> RoPE NEOX with the
layer kind's base (sliding-window layers: rope_freq_base_swa = 10000; global layers: the GGUF
rope.freq_base and rope scaling) -> Q scaled by f_attention_scale -> attention over the layer's
cache (window-masked on SWA layers) -> post-attention RMSNorm + residual -> RMSNorm -> GELU(tanh)
gated FFN -> post-FFN RMSNorm + residual; output RMSNorm; tied output; optional final logit
soft-capping.

Norm weights are used as stored: the GGUF converter already added Gemma's `1 +` to every
`*norm.weight` (transformers subtracts it again when it loads a GGUF).

archs/gemma2.py is this model through its class attributes: no Q/K norms (None), attention-logit
soft-capping, its 27B's layer count, its defaults, and no fused C layer."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...kernels.fused_layers import FusedLayers, LayerSpec
from ...memory.factory import Memory, cache_for_layer
from ..graph import UBatchInputs
from ..hparams import HParams
from ..attend import attend
from ..layers import glu, project, qkv_split, rms_norm, rms_norm_add_
from ..loader import WeightLoader
from ..qmatrix import QMatrix
from ..rope import ROPE_TYPE_NEOX, RopeParams, apply_rope, norm_rope_qk_, rope_cos_sin
from ..stage import StageLayers


@dataclass(slots=True)
class Gemma3Layer:
    attn_norm: torch.Tensor  # [n_embd]
    wqkv: QMatrix  # [(n_head + 2 n_head_kv) * d, n_embd]: Q | K | V stacked (one product)
    wo: QMatrix  # [n_embd, n_head * d]
    attn_q_norm: torch.Tensor | None  # [d]; None: Gemma 2 (no Q/K norms)
    attn_k_norm: torch.Tensor | None  # [d]
    attn_post_norm: torch.Tensor  # [n_embd]
    ffn_norm: torch.Tensor  # [n_embd]
    ffn_gate: QMatrix  # [n_ff, n_embd]
    ffn_up: QMatrix  # [n_ff, n_embd]
    ffn_down: QMatrix  # [n_embd, n_ff]
    ffn_post_norm: torch.Tensor  # [n_embd]


def attention_scale(hp: HParams, n_layer_27b: int = 62) -> float:
    """llama_model_gemma3::load_arch_hparams (gemma2's too): 1/sqrt(n_embd / n_head) for the
    27B (62 layers; Gemma 2's: 46), else 1/sqrt(n_embd_head_k) (gemma_pytorch's
    query_pre_attn_scalar)."""
    if hp.f_attention_scale:
        return hp.f_attention_scale
    if hp.n_layer == n_layer_27b:
        return 1.0 / math.sqrt(hp.n_embd // hp.n_head)
    return 1.0 / math.sqrt(hp.n_embd_head_k)


class Gemma3Model:
    arch_name = "gemma3"  # GGUF general.architecture (archs.arch_class looks it up)
    rope_type = ROPE_TYPE_NEOX
    n_layer_27b = 62  # attention_scale's 27B
    final_softcap_default = 0.0  # {arch}.final_logit_softcapping when absent (0: none)
    attn_softcap_default = 0.0  # {arch}.attn_logit_softcapping when absent (read where hp.attn_soft_cap)
    swa_rope_scaled = False  # the window layers' RoPE takes rope_freq_scale (rope_freq_scale_train_swa)
    has_qk_norm = True  # attn_q_norm / attn_k_norm per layer (Gemma 2 has none)

    def __init__(self, hp: HParams, w: WeightLoader, stage: StageLayers | None = None) -> None:
        self.hp = hp
        self.stage = stage or StageLayers.whole(hp.n_layer)  # the layers this process holds
        # output is tok_embd when tied; parts this stage does not hold are None
        self.tok_embd, self.output_norm, self.output = w.embeddings(self.stage.first, self.stage.last)
        self.layer_ids = self.stage.ids
        self.layers = [self._load_layer(w, il) for il in self.layer_ids]
        self.f_attention_scale = attention_scale(hp, self.n_layer_27b)
        arch = hp.arch
        self.f_final_logit_softcapping = float(w.f.get(f"{arch}.final_logit_softcapping", self.final_softcap_default) or 0.0)
        self.f_attn_logit_softcapping = (float(w.f.get(f"{arch}.attn_logit_softcapping", self.attn_softcap_default) or 0.0)
                                         if hp.attn_soft_cap else 0.0)
        self.rope_global = RopeParams(hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale, self.rope_type)
        scale_swa = hp.rope_freq_scale if self.swa_rope_scaled else 1.0  # rope_freq_scale_train_swa
        self.rope_swa = RopeParams(hp.n_rot, hp.rope_freq_base_swa, scale_swa, self.rope_type)
        self.fused = self._fused(w)

    def _fused(self, w: WeightLoader) -> FusedLayers | None:
        """Every layer in one C call for few-row ubatches (kernels/fused_layers.py), when the
        weights are in blocks; RoPE set 0 is the global layers', 1 the window layers'."""
        hp = self.hp
        specs = [LayerSpec(L.attn_norm, L.ffn_norm, [L.wqkv], L.wo, [L.ffn_gate, L.ffn_up], L.ffn_down,
                           swa=hp.is_swa(il), rope_set=int(hp.is_swa(il)), q_norm=L.attn_q_norm,
                           k_norm=L.attn_k_norm, attn_post_norm=L.attn_post_norm, ffn_post_norm=L.ffn_post_norm)
                 for il, L in zip(self.layer_ids, self.layers)]
        return FusedLayers.build(hp, specs, w.kernels, self.f_attention_scale, 1.0, True, True, self.layer_ids)

    def _load_layer(self, w: WeightLoader, il: int) -> Gemma3Layer:
        p = f"blk.{il}."
        return Gemma3Layer(
            attn_norm=w.get(p + "attn_norm.weight"),
            wqkv=w.matrix(p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"),
            wo=w.matrix(p + "attn_output.weight"),
            attn_q_norm=w.get(p + "attn_q_norm.weight") if self.has_qk_norm else None,
            attn_k_norm=w.get(p + "attn_k_norm.weight") if self.has_qk_norm else None,
            attn_post_norm=w.get(p + "post_attention_norm.weight"),
            ffn_norm=w.get(p + "ffn_norm.weight"),
            # gate and up apart: stacked, Gemma 3's [2 n_ff, n_embd] passes DEQUANT_CHUNK and a
            # prompt's GEMM would be cut in two and copied together (~10% of a 270M prefill)
            ffn_gate=w.matrix(p + "ffn_gate.weight"),
            ffn_up=w.matrix(p + "ffn_up.weight"),
            ffn_down=w.matrix(p + "ffn_down.weight"),  # (GeGLU rows keep the outlier rule: layers.c prep_ff_row)
            ffn_post_norm=w.get(p + "post_ffw_norm.weight"),
        )

    def rope_for_layer(self, il: int) -> RopeParams:
        """llama_model::get_rope_freq_base/scale: the SWA values on window layers."""
        return self.rope_swa if self.hp.is_swa(il) else self.rope_global

    def forward(self, inp: UBatchInputs, kv: Memory) -> torch.Tensor:
        """One ubatch through the network; returns logits [n_outputs, n_vocab] float32 for the
        rows flagged as outputs.  Each layer writes K and V into its own cache (SWA or not)."""
        return self.logits(inp, self.forward_layers(inp, kv, self.embed(inp)))

    def embed(self, inp: UBatchInputs) -> torch.Tensor:
        """The ubatch's scaled token embeddings [n_tokens, n_embd] (the first stage's part)."""
        return self.tok_embd.get_rows(inp.tokens).mul_(math.sqrt(self.hp.n_embd))  # get_rows: a new tensor

    def forward_layers(self, inp: UBatchInputs, kv: Memory, x: torch.Tensor) -> torch.Tensor:
        """x [n_tokens, n_embd] through this stage's layers, in place; returns x."""
        hp = self.hp
        n_tokens = inp.tokens.shape[0]
        d, eps = hp.n_embd_head_k, hp.f_norm_rms_eps
        ropes = {p: rope_cos_sin(inp.pos, p) for p in {self.rope_global, self.rope_swa}}  # [n_tokens, 1, n_rot/2]
        caches = [cache_for_layer(kv, il) for il in self.layer_ids]
        if self.fused is not None and self.fused.run(inp, caches, x, [ropes[self.rope_global], ropes[self.rope_swa]]):
            return x
        n_q, n_k = hp.n_head * d, hp.n_head_kv * d
        for il, L in zip(self.layer_ids, self.layers):  # x updated in place, as the fused path does
            rope = self.rope_for_layer(il)
            cos, sin = ropes[rope]
            q, k, v = qkv_split(L.wqkv, rms_norm(x, L.attn_norm, eps), n_q, n_k)  # [n_tokens, n_q], .. (views or parts)
            # Gemma 3's per-head norms (Gemma 2: none) and RoPE, in place where the product wrote q and k
            q, k = norm_rope_qk_(q.view(n_tokens, hp.n_head, d), k.view(n_tokens, hp.n_head_kv, d), L.attn_q_norm,
                                 L.attn_k_norm, eps, cos, sin, rope)
            # the attention scale on the scores (llama.cpp and the fused path scale q: the same to
            # rounding); Gemma 2 soft-caps the scaled scores
            attn = attend(inp, cache_for_layer(kv, il), il, q, k, v, self.f_attention_scale, hp.is_swa(il),
                          self.f_attn_logit_softcapping)
            rms_norm_add_(L.wo(attn), L.attn_post_norm, eps, x)  # x += post-norm(attention's output)
            h = rms_norm(x, L.ffn_norm, eps)
            rms_norm_add_(L.ffn_down(glu(L.ffn_gate(h), L.ffn_up(h), gelu=True)), L.ffn_post_norm, eps, x)
        return x

    def logits(self, inp: UBatchInputs, x: torch.Tensor) -> torch.Tensor:
        """The output rows of x [n_tokens, n_embd] -> logits [n_outputs, n_vocab] (the last stage's part)."""
        x = x.index_select(0, inp.out_rows)  # [n_outputs, n_embd]
        logits = project(self.output, rms_norm(x, self.output_norm, self.hp.f_norm_rms_eps), inp.logits_out,
                         inp.deterministic)
        if self.f_final_logit_softcapping:
            c = self.f_final_logit_softcapping
            logits = torch.tanh(logits / c) * c
        return logits

    def hidden(self, inp: UBatchInputs, x: torch.Tensor) -> torch.Tensor:
        """t_embd: the output rows of x after the output norm, [n_outputs, n_embd] (embeddings)."""
        return rms_norm(x.index_select(0, inp.out_rows), self.output_norm, self.hp.f_norm_rms_eps)

    def rotate_k(self, il: int, k: torch.Tensor, delta: torch.Tensor, n_ctx_seq: int) -> torch.Tensor:
        """K-shift: k [n, n_embd_k_gqa] rotated by delta [n] positions with layer il's RoPE (one
        whatever n_ctx_seq)."""
        rope = self.rope_for_layer(il)
        cos, sin = rope_cos_sin(delta, rope)
        kh = k.view(k.shape[0], self.hp.n_head_kv, self.hp.n_embd_head_k)
        return apply_rope(kh, cos, sin, rope).reshape(k.shape)
