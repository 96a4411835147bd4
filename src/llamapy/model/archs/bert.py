"""LLM_ARCH_BERT (llama.cpp's models/bert.cpp): token + token-type (row 0, "sentence A") +
learned absolute position embeddings, the embedding LayerNorm, then per layer Q/K/V with
biases, non-causal attention within each sequence, the output projection, residual and
LayerNorm (attn_output_norm), a GELU FFN, residual and LayerNorm (layer_output_norm).  The
result (t_embd) is the last layer's output, no output norm; no logits, no KV cache: each
ubatch holds every token of its sequences (embed/ checks that), so a sequence attends to
its own tokens of this ubatch only.  The classifier head (cls, cls.output) is read for rank
pooling (embed/pooling.py).  nomic-bert (archs/nomic_bert.py) is this graph with RoPE instead
of learned positions and a SwiGLU FFN (llama.cpp shares the graph too): the hooks
_load_attn, _load_ffn and self.rope."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..graph import UBatchInputs
from ..hparams import HParams
from ..loader import WeightLoader
from ..qmatrix import QMatrix
from ..rope import ROPE_TYPE_NORM, RopeParams, apply_rope, rope_cos_sin
from ..stage import StageLayers


@dataclass(slots=True)
class BertLayer:
    wqkv: QMatrix  # [(n_head + 2 n_head_kv) * d, n_embd]
    bqkv: torch.Tensor | None  # [(n_head + 2 n_head_kv) * d] (zeros where the file has only some)
    wo: QMatrix  # [n_embd, n_head * d]
    bo: torch.Tensor | None  # [n_embd]
    attn_out_norm: tuple[torch.Tensor, torch.Tensor]  # LayerNorm weight, bias [n_embd]
    ffn_up: QMatrix  # [n_ff, n_embd] (with ffn_gate: gate | up stacked, [2 n_ff, n_embd])
    ffn_gate: bool  # SwiGLU: silu(gate x) * (up x) (nomic-bert), else GELU(up x)
    bup: torch.Tensor | None  # [n_ff]
    ffn_down: QMatrix  # [n_embd, n_ff]
    bdown: torch.Tensor | None  # [n_embd]
    layer_out_norm: tuple[torch.Tensor, torch.Tensor]


@dataclass(slots=True)
class ClsHead:
    """build_pooling's classification head: tanh(cls @ x + cls_b), then cls.output; softmax
    over the outputs for qwen3 (Qwen3-Reranker: cls.output holds lm_head's "yes" and "no" rows)."""

    cls: QMatrix | None  # [n_embd, n_embd]
    cls_b: torch.Tensor | None
    cls_out: QMatrix | None  # [n_cls_out, n_embd]
    cls_out_b: torch.Tensor | None
    softmax: bool = False

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x [n_seqs, n_embd] -> [n_seqs, n_cls_out] (or [n_seqs, n_embd] without cls.output)."""
        if self.cls is not None:
            x = self.cls(x)
            if self.cls_b is not None:
                x = x + self.cls_b
            x = torch.tanh(x)
        if self.cls_out is not None:
            x = self.cls_out(x)
            if self.cls_out_b is not None:
                x = x + self.cls_out_b
        return torch.softmax(x.float(), dim=-1) if self.softmax else x


def seq_groups(seq: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows of each of S sequences padded to L_max: idx [S, L_max] (pads repeat the
    sequence's first row), key mask [S, 1, 1, L_max] (True: a real row), take [n]: each row's
    place in the flattened S * L_max."""
    seqs, inv = np.unique(seq, return_inverse=True)
    groups = [np.nonzero(inv == g)[0] for g in range(len(seqs))]
    l_max = max(len(g) for g in groups)
    idx = np.zeros((len(groups), l_max), dtype=np.int64)
    valid = np.zeros((len(groups), l_max), dtype=bool)
    take = np.zeros(len(seq), dtype=np.int64)
    for i, g in enumerate(groups):
        idx[i, : len(g)], idx[i, len(g):] = g, g[0]
        valid[i, : len(g)] = True
        take[g] = i * l_max + np.arange(len(g))
    t = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    return t(idx), t(valid)[:, None, None, :], t(take)


class BertModel:
    arch_name = "bert"
    rope_type = ROPE_TYPE_NORM  # unused: absolute positions
    has_logits = False  # an encoder: embeddings only (Context.decode refuses logits)

    def __init__(self, hp: HParams, w: WeightLoader, stage: StageLayers | None = None) -> None:
        self.hp = hp
        self.stage = stage or StageLayers.whole(hp.n_layer)
        if not (self.stage.first and self.stage.last):
            raise ValueError("bert: a pipeline stage of an encoder is not supported (run it whole)")

        def opt(name: str) -> torch.Tensor | None:
            return w.get(name) if w.has(name) else None

        self.tok_embd = w.matrix("token_embd.weight")
        self.pos_embd: torch.Tensor | None = None  # [n_ctx_train, n_embd] learned positions (bert), or RoPE
        self.rope: RopeParams | None = None
        self._load_positions(w)
        types = opt("token_types.weight")
        self.type_row0 = None if types is None else types[0]  # [n_embd]: llama.cpp's token types are all 0
        self.tok_norm = (w.get("token_embd_norm.weight"), w.get("token_embd_norm.bias"))
        self.head: ClsHead | None = ClsHead(w.matrix("cls.weight") if w.has("cls.weight") else None, opt("cls.bias"),
                            w.matrix("cls.output.weight") if w.has("cls.output.weight") else None, opt("cls.output.bias"))
        if self.head.cls is None and self.head.cls_out is None:
            self.head = None  # no classifier: rank pooling refused (embed/)
        self.layer_ids = self.stage.ids
        self.layers = [self._load_layer(w, il) for il in self.layer_ids]
        self.output_norm = None
        self.output = None

    def _load_positions(self, w: WeightLoader) -> None:
        self.pos_embd = w.get("position_embd.weight")

    def _load_attn(self, w: WeightLoader, p: str) -> tuple[QMatrix, torch.Tensor | None]:
        """Q|K|V stacked and their biases (zeros where the file has only some)."""
        hp = self.hp
        d = hp.n_embd_head_k
        sizes = (hp.n_head * d, hp.n_head_kv * d, hp.n_head_kv * hp.n_embd_head_v)
        biases = [w.get(p + f"attn_{x}.bias") if w.has(p + f"attn_{x}.bias") else None for x in "qkv"]
        bqkv = None
        if any(b is not None for b in biases):
            bqkv = torch.cat([b if b is not None else torch.zeros(n) for b, n in zip(biases, sizes)])
        return w.matrix(p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"), bqkv

    def _load_ffn(self, w: WeightLoader, p: str) -> tuple[QMatrix, bool]:
        """(ffn_up, gated): bert's GELU FFN reads ffn_up alone."""
        return w.matrix(p + "ffn_up.weight"), False

    def _load_layer(self, w: WeightLoader, il: int) -> BertLayer:
        p = f"blk.{il}."

        def opt(name: str) -> torch.Tensor | None:
            return w.get(p + name) if w.has(p + name) else None

        wqkv, bqkv = self._load_attn(w, p)
        ffn_up, gated = self._load_ffn(w, p)
        return BertLayer(
            wqkv=wqkv, bqkv=bqkv,
            wo=w.matrix(p + "attn_output.weight"), bo=opt("attn_output.bias"),
            attn_out_norm=(w.get(p + "attn_output_norm.weight"), w.get(p + "attn_output_norm.bias")),
            ffn_up=ffn_up, ffn_gate=gated, bup=None if gated else opt("ffn_up.bias"),
            ffn_down=w.matrix(p + "ffn_down.weight"), bdown=None if gated else opt("ffn_down.bias"),
            layer_out_norm=(w.get(p + "layer_output_norm.weight"), w.get(p + "layer_output_norm.bias")),
        )

    def forward(self, inp: UBatchInputs, kv) -> torch.Tensor:
        raise ValueError("bert is an embedding model: it has no logits (use --embedding / llamapy embedding)")

    def embed(self, inp: UBatchInputs) -> torch.Tensor:
        """Token + type row 0 (+ learned position) embeddings, LayerNorm'd: [n_tokens, n_embd]."""
        pos = inp.pos
        x = self.tok_embd.get_rows(inp.tokens).float()
        if self.pos_embd is not None:
            if int(pos.max()) >= self.pos_embd.shape[0]:
                raise ValueError(f"{self.arch_name}: position {int(pos.max())} is past the model's "
                                 f"{self.pos_embd.shape[0]} learned positions (n_ctx_train): shorten the input")
            x = x + self.pos_embd.float().index_select(0, pos)
        if self.type_row0 is not None:
            x = x + self.type_row0
        return self._norm(x, self.tok_norm)

    def _norm(self, x: torch.Tensor, wb: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), wb[0].float(), wb[1].float(), self.hp.f_norm_eps)

    def forward_layers(self, inp: UBatchInputs, kv, x: torch.Tensor) -> torch.Tensor:
        """x [n_tokens, n_embd] through every layer; returns the last layer's output."""
        hp = self.hp
        n, d = x.shape[0], hp.n_embd_head_k
        n_q, n_k = hp.n_head * d, hp.n_head_kv * d
        idx, mask, take = seq_groups(np.array([s[0] for s in inp.ubatch.seq_id], dtype=np.int64), x.device)
        cos_sin = None if self.rope is None else rope_cos_sin(inp.pos, self.rope)  # [n, 1, n_rot/2] each
        for L in self.layers:
            qkv = L.wqkv(x)  # [n, n_q + 2 n_k]
            if L.bqkv is not None:
                qkv = qkv + L.bqkv
            # each sequence's rows padded to [S, L_max]: attention within a sequence only, never n x n
            q, k = qkv[:, :n_q].view(n, hp.n_head, d), qkv[:, n_q : n_q + n_k].view(n, hp.n_head_kv, d)
            if cos_sin is not None:  # nomic-bert: RoPE on Q and K at each token's position
                q, k = (apply_rope(t, *cos_sin, self.rope) for t in (q, k))
            q = q[idx].transpose(1, 2)  # [S, n_head, L_max, d]
            k = k[idx].transpose(1, 2)
            v = qkv[:, n_q + n_k :].view(n, hp.n_head_kv, hp.n_embd_head_v)[idx].transpose(1, 2)
            if hp.n_head_kv != hp.n_head:
                k, v = (t.repeat_interleave(hp.n_gqa, 1) for t in (k, v))
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / d**0.5)  # [S, n_head, L_max, d]
            o = o.transpose(1, 2).reshape(-1, hp.n_head * hp.n_embd_head_v).index_select(0, take)  # [n, n_head * d]
            cur = L.wo(o.contiguous())
            if L.bo is not None:
                cur = cur + L.bo
            x = self._norm(cur + x, L.attn_out_norm)
            h = L.ffn_up(x)  # [n, n_ff] (gated: [n, 2 n_ff], gate | up)
            if L.bup is not None:
                h = h + L.bup
            if L.ffn_gate:
                g, u = h.chunk(2, dim=-1)
                h = F.silu(g) * u
            else:
                h = F.gelu(h, approximate="tanh")
            h = L.ffn_down(h.contiguous())
            if L.bdown is not None:
                h = h + L.bdown
            x = self._norm(h + x, L.layer_out_norm)
        return x

    def hidden(self, inp: UBatchInputs, x: torch.Tensor) -> torch.Tensor:
        """t_embd of the output rows: [n_outputs, n_embd] (no output norm in bert)."""
        return x.index_select(0, inp.out_rows)

    def rotate_k(self, il: int, k: torch.Tensor, delta: torch.Tensor, n_ctx_seq: int = 0) -> torch.Tensor:
        raise ValueError("bert keeps no KV cache to shift")
