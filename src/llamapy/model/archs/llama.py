"""LLM_ARCH_LLAMA: RMSNorm, RoPE (NORM pairs; Llama 3's rope_freqs factors where the file has
them), grouped-query attention, SwiGLU FFN, tied or separate output.

The layer is the family's: optional Q/K/V biases (llama_model_base::create_tensor_qkv; Qwen2's)
added to the one Q|K|V product, and optional per-head RMSNorms of Q and K before RoPE (Qwen3's);
archs/qwen2.py and archs/qwen3.py are this model with their RoPE type and tensors."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...kernels.fused_layers import FusedLayers, LayerSpec
from ...kernels.moe_row import MoeWork, moe_row_for
from ...memory.kv_cache import KVCache
from ..graph import UBatchInputs
from ..hparams import HParams
from ..attend import attend
from ..block_matrix import glu_input
from ..layers import glu_stacked, project, qkv_split, rms_norm, takes_out
from ..loader import WeightLoader
from ..moe import MoeFFN
from ..qmatrix import QMatrix
from ..rope import ROPE_TYPE_NORM, RopeParams, apply_rope, norm_rope_qk_, rope_cos_sin
from ..stage import StageLayers


@dataclass(slots=True)
class LlamaLayer:
    attn_norm: torch.Tensor  # [n_embd]
    wqkv: QMatrix  # [(n_head + 2 n_head_kv) * d, n_embd]: Q, K, V stacked, one matmul
    wo: QMatrix  # [n_embd, n_head * d]
    ffn_norm: torch.Tensor
    ffn_gate_up: QMatrix | None  # [2 n_ff, n_embd]: gate and up stacked (None: an MoE layer)
    ffn_down: QMatrix | None  # [n_embd, n_ff]
    bq: torch.Tensor | None = None  # [n_head * d]: the Q|K|V product's biases, where the file has them
    bk: torch.Tensor | None = None  # [n_head_kv * d]
    bv: torch.Tensor | None = None  # [n_head_kv * d]
    attn_q_norm: torch.Tensor | None = None  # [d]: per-head RMSNorm of Q before RoPE (Qwen3)
    attn_k_norm: torch.Tensor | None = None  # [d]
    moe: MoeFFN | None = None  # the mixture-of-experts FFN in place of the dense one (qwen3moe, Mixtral)


class LlamaModel:
    arch_name = "llama"  # GGUF general.architecture (archs.arch_class looks it up)
    rope_type = ROPE_TYPE_NORM

    def __init__(self, hp: HParams, w: WeightLoader, stage: StageLayers | None = None) -> None:
        self.hp = hp
        self.stage = stage or StageLayers.whole(hp.n_layer)  # the layers this process holds
        # output is tok_embd when tied; parts this stage does not hold are None
        self.tok_embd, self.output_norm, self.output = w.embeddings(self.stage.first, self.stage.last)
        self.layer_ids = self.stage.ids
        self.moe_work = MoeWork()  # the MoE layers' multi-row working bytes (kernels/moe_row.py)
        self.layers = [self._load_layer(w, il) for il in self.layer_ids]
        self.rope = RopeParams(hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale, self.rope_type, _freq_factors(w))
        self.fused = self._fused(w)

    def _fused(self, w: WeightLoader) -> FusedLayers | None:
        """Every layer in one C call for few-row ubatches (kernels/fused_layers.py), when the
        weights are in blocks and no layer has biases (the C layer adds none); MoE layers (one-row
        ubatches) when every layer's experts take the C row (kernels/moe_row.py)."""
        if any(b is not None for L in self.layers for b in (L.bq, L.bk, L.bv)):
            return None
        rows = [moe_row_for(L.moe) if L.moe else None for L in self.layers]
        if any(L.moe for L in self.layers) and not all(rows):
            return None
        specs = [LayerSpec(L.attn_norm, L.ffn_norm, [L.wqkv], L.wo, [L.ffn_gate_up], L.ffn_down,
                           q_norm=L.attn_q_norm, k_norm=L.attn_k_norm, moe=r) for L, r in zip(self.layers, rows)]
        hp = self.hp
        return FusedLayers.build(hp, specs, w.kernels, 1.0, 1.0 / hp.n_embd_head_k**0.5, self.rope_type != 0, False,
                                 self.layer_ids)

    def _load_layer(self, w: WeightLoader, il: int) -> LlamaLayer:
        """Layer il's tensors: the required ones, and the optional ones the file has; with
        experts (hp.n_expert > 0) the router and ffn_*_exps in place of the dense FFN."""
        p = f"blk.{il}."

        def opt(name: str) -> torch.Tensor | None:
            return w.get(p + name) if w.has(p + name) else None

        moe = None
        if self.hp.n_expert:
            moe = MoeFFN(w.matrix(p + "ffn_gate_inp.weight"), w.experts(p + "ffn_gate_exps.weight"),
                         w.experts(p + "ffn_up_exps.weight"), w.experts(p + "ffn_down_exps.weight"),
                         self.hp.n_expert_used, work=self.moe_work)
        return LlamaLayer(
            attn_norm=w.get(p + "attn_norm.weight"),
            wqkv=w.matrix(p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"),
            wo=w.matrix(p + "attn_output.weight"),
            ffn_norm=w.get(p + "ffn_norm.weight"),
            ffn_gate_up=None if moe else w.matrix(p + "ffn_gate.weight", p + "ffn_up.weight"),
            ffn_down=None if moe else glu_input(w.matrix(p + "ffn_down.weight")),
            moe=moe,
            bq=opt("attn_q.bias"), bk=opt("attn_k.bias"), bv=opt("attn_v.bias"),
            attn_q_norm=opt("attn_q_norm.weight"), attn_k_norm=opt("attn_k_norm.weight"),
        )

    def rope_for_layer(self, il: int) -> RopeParams:
        return self.rope

    def rope_for_ctx(self, n_ctx_seq: int) -> RopeParams:
        """The RoPE of a context whose sequences hold n_ctx_seq cells (llama_model::
        get_rope_factors: Phi-3's LongRoPE picks its factors by it; the others have one)."""
        return self.rope

    def forward(self, inp: UBatchInputs, kv: KVCache) -> torch.Tensor:
        """One ubatch through the network; returns logits [n_outputs, n_vocab] float32 for the
        rows flagged as outputs.  Writes the ubatch's K and V into its cells first."""
        return self.logits(inp, self.forward_layers(inp, kv, self.embed(inp)))

    def embed(self, inp: UBatchInputs) -> torch.Tensor:
        """The ubatch's token embeddings [n_tokens, n_embd] (the first stage's part)."""
        return self.tok_embd.get_rows(inp.tokens)

    def forward_layers(self, inp: UBatchInputs, kv: KVCache, x: torch.Tensor) -> torch.Tensor:
        """x [n_tokens, n_embd] through this stage's layers, in place; returns x."""
        cos, sin = rope_cos_sin(inp.pos, self.rope_for_ctx(kv.size))  # [n_tokens, 1, n_rot/2]; kv.size: n_ctx_seq
        if self.fused is None or not self.fused.run(inp, [kv] * len(self.layers), x, [(cos, sin)]):  # few rows: one C call
            for il, L in zip(self.layer_ids, self.layers):  # each block's temporaries die when it returns
                self._attention(inp, kv, il, L, x, cos, sin)
                self._ffn(L, x, inp)
        return x

    def logits(self, inp: UBatchInputs, x: torch.Tensor) -> torch.Tensor:
        """The output rows of x [n_tokens, n_embd] -> logits [n_outputs, n_vocab] (the last stage's part)."""
        x = x.index_select(0, inp.out_rows)  # [n_outputs, n_embd]
        return project(self.output, rms_norm(x, self.output_norm, self.hp.f_norm_rms_eps), inp.logits_out,
                         inp.deterministic)

    def hidden(self, inp: UBatchInputs, x: torch.Tensor) -> torch.Tensor:
        """t_embd: the output rows of x after the output norm, [n_outputs, n_embd] (embeddings)."""
        return rms_norm(x.index_select(0, inp.out_rows), self.output_norm, self.hp.f_norm_rms_eps)

    def _attention(self, inp: UBatchInputs, kv: KVCache, il: int, L: LlamaLayer, x: torch.Tensor,
                   cos: torch.Tensor, sin: torch.Tensor) -> None:
        """x [n_tokens, n_embd] += the attention block's output (the residual add in place)."""
        hp = self.hp
        n_tokens, d = x.shape[0], hp.n_embd_head_k
        n_q, n_k = hp.n_head * d, hp.n_head_kv * d
        # [n_tokens, n_q], [n_tokens, n_k], [n_tokens, n_v]: views of one product, or a stack's parts
        q, k, v = qkv_split(L.wqkv, rms_norm(x, L.attn_norm, hp.f_norm_rms_eps), n_q, n_k)
        for b, t in ((L.bq, q), (L.bk, k), (L.bv, v)):
            if b is not None:
                t.add_(b)
        # Qwen 3's per-head RMSNorm (the others: none), then RoPE; in place on the CPU
        q, k = norm_rope_qk_(q.view(n_tokens, hp.n_head, d), k.view(n_tokens, hp.n_head_kv, d), L.attn_q_norm,
                             L.attn_k_norm, hp.f_norm_rms_eps, cos, sin, self.rope)
        o = attend(inp, kv, il, q, k, v, 1.0 / d**0.5)
        L.wo.add_into(o, x)

    def _ffn(self, L: LlamaLayer, x: torch.Tensor, inp: UBatchInputs | None = None) -> None:
        """x [n_tokens, n_embd] += the SwiGLU block's output (or the experts', model/moe.py).  The
        gate|up product goes into the context's kept buffer where it is one (inp.work: model/work.py)."""
        if L.moe is not None:
            L.moe.add_into(rms_norm(x, L.ffn_norm, self.hp.f_norm_rms_eps), x)
            return
        m = L.ffn_gate_up
        kept = inp.work.take(x.shape[0], m.n_out) if inp is not None and inp.work is not None and takes_out(m) else None
        gu = project(m, rms_norm(x, L.ffn_norm, self.hp.f_norm_rms_eps), kept)  # [n_tokens, 2 n_ff]: gate | up
        L.ffn_down.add_into(glu_stacked(gu), x)  # SwiGLU

    def rotate_k(self, il: int, k: torch.Tensor, delta: torch.Tensor, n_ctx_seq: int) -> torch.Tensor:
        """K-shift: k [n, n_embd_k_gqa] rotated by delta [n] positions (RoPE composes), with the
        context's RoPE (its attention factor too, as llama.cpp's build_rope_shift applies it)."""
        rope = self.rope_for_ctx(n_ctx_seq)
        cos, sin = rope_cos_sin(delta, rope)
        kh = k.view(k.shape[0], self.hp.n_head_kv, self.hp.n_embd_head_k)
        return apply_rope(kh, cos, sin, rope).reshape(k.shape)


def _freq_factors(w: WeightLoader) -> tuple[float, ...] | None:
    """rope_freqs.weight [n_rot/2] (Llama 3.1+), every layer's (llama.cpp duplicates it), or None."""
    if not w.has("rope_freqs.weight"):
        return None
    return tuple(float(x) for x in w.get("rope_freqs.weight").cpu())
