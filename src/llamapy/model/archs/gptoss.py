"""LLM_ARCH_OPENAI_MOE, GGUF "gpt-oss" (llama.cpp src/models/openai-moe.cpp, graph<iswa>): per
layer RMSNorm -> Q/K/V (+ optional biases) -> RoPE NEOX with YaRN (model/rope.py: ext_factor 1
for rope.scaling.type yarn, the mix of interpolated and extrapolated angles between the
correction dims, cos and sin scaled by 1 + 0.1 ln factor) -> attention scaled by 1/sqrt(n_rot)
over the layer's cache (a sliding window of attention.sliding_window cells on the even layers,
set_swa_pattern(2): memory/iswa.py), each head's softmax with its learned sink logit
(attn_sinks, ggml_soft_max_add_sinks) -> attn_output + bias + residual -> RMSNorm
(post_attention_norm) -> the MoE FFN of model/moe.py with biases everywhere, top-k of the
router's logits softmaxed over the k, swiglu_oai -> residual; output RMSNorm; untied output.

The window layers' RoPE is the global one unless the file sets rope.freq_base_swa (its scale
always the global one).  No fused C layer (no sinks there): every ubatch takes the per-op path,
attention through the materialized KQ (model/attend.py)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...memory.factory import Memory, cache_for_layer
from ..attend import attend
from ..graph import UBatchInputs
from ..hparams import HParams
from ..layers import project, rms_norm
from ..loader import WeightLoader
from ..moe import MoeFFN
from ..qmatrix import QMatrix
from ..rope import ROPE_TYPE_NEOX, RopeParams, apply_rope, apply_rope_, rope_cos_sin
from ..stage import StageLayers


@dataclass(slots=True)
class GptOssLayer:
    attn_norm: torch.Tensor  # [n_embd]
    wqkv: QMatrix  # [(n_head + 2 n_head_kv) * d, n_embd]: Q | K | V stacked (one product)
    bqkv: tuple[torch.Tensor | None, ...]  # Q, K, V biases [n_head * d], [n_head_kv * d] x 2 where the file has them
    wo: QMatrix  # [n_embd, n_head * d]
    bo: torch.Tensor  # [n_embd]: attn_output.bias
    sinks: torch.Tensor  # [n_head]: attn_sinks.weight, float32
    post_norm: torch.Tensor  # [n_embd]: post_attention_norm, the FFN's input norm
    moe: MoeFFN


def _rope(hp: HParams, base: float) -> RopeParams:
    return RopeParams(hp.n_rot, base, hp.rope_freq_scale, ROPE_TYPE_NEOX, None, hp.yarn_ext_factor,
                      hp.yarn_attn_factor, hp.yarn_beta_fast, hp.yarn_beta_slow, hp.n_ctx_orig_yarn)


class GptOssModel:
    arch_name = "gpt-oss"  # GGUF general.architecture (archs.arch_class looks it up)
    fused = None  # no fused C layer: it has no attention sinks

    def __init__(self, hp: HParams, w: WeightLoader, stage: StageLayers | None = None) -> None:
        self.hp = hp
        self.stage = stage or StageLayers.whole(hp.n_layer)  # the layers this process holds
        self.tok_embd, self.output_norm, self.output = w.embeddings(self.stage.first, self.stage.last)
        self.layer_ids = self.stage.ids
        self.layers = [self._load_layer(w, il) for il in self.layer_ids]
        self.rope_global = _rope(hp, hp.rope_freq_base)
        self.rope_swa = _rope(hp, hp.rope_freq_base_swa)
        self.f_attention_scale = 1.0 / hp.n_rot**0.5  # 1/sqrtf(n_rot)

    def _load_layer(self, w: WeightLoader, il: int) -> GptOssLayer:
        p = f"blk.{il}."
        hp = self.hp

        def opt(name: str) -> torch.Tensor | None:
            return w.get(p + name) if w.has(p + name) else None

        moe = MoeFFN(w.matrix(p + "ffn_gate_inp.weight"), w.experts(p + "ffn_gate_exps.weight"),
                     w.experts(p + "ffn_up_exps.weight"), w.experts(p + "ffn_down_exps.weight"), hp.n_expert_used,
                     norm_w=False, softmax_weight=True, oai=True, gate_inp_b=w.get(p + "ffn_gate_inp.bias"),
                     gate_b=w.get(p + "ffn_gate_exps.bias"), up_b=w.get(p + "ffn_up_exps.bias"),
                     down_b=w.get(p + "ffn_down_exps.bias"))
        return GptOssLayer(
            attn_norm=w.get(p + "attn_norm.weight"),
            wqkv=w.matrix(p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"),
            bqkv=(opt("attn_q.bias"), opt("attn_k.bias"), opt("attn_v.bias")),
            wo=w.matrix(p + "attn_output.weight"),
            bo=w.get(p + "attn_output.bias"),
            sinks=w.get(p + "attn_sinks.weight").float(),
            post_norm=w.get(p + "post_attention_norm.weight"),
            moe=moe,
        )

    def rope_for_layer(self, il: int) -> RopeParams:
        """llama_model::get_rope_freq_base/scale: the SWA values on window layers."""
        return self.rope_swa if self.hp.is_swa(il) else self.rope_global

    def forward(self, inp: UBatchInputs, kv: Memory) -> torch.Tensor:
        """One ubatch through the network; returns logits [n_outputs, n_vocab] float32."""
        return self.logits(inp, self.forward_layers(inp, kv, self.embed(inp)))

    def embed(self, inp: UBatchInputs) -> torch.Tensor:
        """The ubatch's token embeddings [n_tokens, n_embd] (the first stage's part)."""
        return self.tok_embd.get_rows(inp.tokens)

    def forward_layers(self, inp: UBatchInputs, kv: Memory, x: torch.Tensor) -> torch.Tensor:
        """x [n_tokens, n_embd] through this stage's layers, in place; returns x."""
        hp = self.hp
        n_tokens = inp.tokens.shape[0]
        d, eps = hp.n_embd_head_k, hp.f_norm_rms_eps
        n_q, n_k = hp.n_head * d, hp.n_head_kv * d
        ropes = {p: rope_cos_sin(inp.pos, p) for p in {self.rope_global, self.rope_swa}}  # [n_tokens, 1, n_rot/2]
        for il, L in zip(self.layer_ids, self.layers):
            rope = self.rope_for_layer(il)
            cos, sin = ropes[rope]
            qkv = L.wqkv(rms_norm(x, L.attn_norm, eps))  # [n_tokens, n_q + 2 n_k]
            for b, lo, hi in zip(L.bqkv, (0, n_q, n_q + n_k), (n_q, n_q + n_k, qkv.shape[1])):
                if b is not None:
                    qkv[:, lo:hi].add_(b)
            q = apply_rope_(qkv[:, :n_q].view(n_tokens, hp.n_head, d), cos, sin, rope)  # [n_tokens, n_head, d]
            k = apply_rope_(qkv[:, n_q : n_q + n_k].view(n_tokens, hp.n_head_kv, d), cos, sin, rope)
            attn = attend(inp, cache_for_layer(kv, il), il, q, k, qkv[:, n_q + n_k :], self.f_attention_scale,
                          hp.is_swa(il), sinks=L.sinks)  # [n_tokens, n_head * d]
            x.add_(L.wo(attn)).add_(L.bo)
            L.moe.add_into(rms_norm(x, L.post_norm, eps), x)
        return x

    def logits(self, inp: UBatchInputs, x: torch.Tensor) -> torch.Tensor:
        """The output rows of x [n_tokens, n_embd] -> logits [n_outputs, n_vocab] (the last stage's part)."""
        x = x.index_select(0, inp.out_rows)  # [n_outputs, n_embd]
        return project(self.output, rms_norm(x, self.output_norm, self.hp.f_norm_rms_eps), inp.logits_out)

    def rotate_k(self, il: int, k: torch.Tensor, delta: torch.Tensor, n_ctx_seq: int = 0) -> torch.Tensor:
        """K-shift: k [n, n_embd_k_gqa] rotated by delta [n] positions with layer il's RoPE
        (llama_kv_cache::build_rope_shift: the YaRN scale applied again, as there)."""
        rope = self.rope_for_layer(il)
        cos, sin = rope_cos_sin(delta, rope)
        kh = k.view(k.shape[0], self.hp.n_head_kv, self.hp.n_embd_head_k)
        return apply_rope(kh, cos, sin, rope).reshape(k.shape)
