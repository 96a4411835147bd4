"""Row-wise building blocks shared by architectures, plus the one op that reads across
rows: attention, which consults the KQ mask."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

Linear = Callable[[torch.Tensor], torch.Tensor] | torch.Tensor  # a QMatrix, or a dense [n_out, n_in]


def linear(x: torch.Tensor, w: Linear) -> torch.Tensor:
    """x: [n, n_in] -> [n, n_out] through a QMatrix or a dense weight."""
    return F.linear(x, w) if isinstance(w, torch.Tensor) else w(x)


def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x: [..., n] -> x / sqrt(mean(x^2) + eps) * w   (ggml_rms_norm then ggml_mul)."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
              flash: bool = True) -> torch.Tensor:
    """Grouped-query attention through an additive mask.  flash: fused SDPA (the KQ matrix is
    never materialized by us); otherwise KQ = q·kᵀ·scale + mask, softmax, ·v explicitly.

    q: [n_tokens, n_head, d_k]; k: [n_kv, n_head_kv, d_k]; v: [n_kv, n_head_kv, d_v];
    mask: [n_tokens, n_kv] (0 or -inf).  Query head h reads KV head h // (n_head / n_head_kv),
    ggml's broadcast.  Returns [n_tokens, n_head * d_v]."""
    n_tokens, n_head, _ = q.shape
    n_head_kv = k.shape[1]
    qh = q.transpose(0, 1)  # [n_head, n_tokens, d_k]
    kh = k.transpose(0, 1)  # [n_head_kv, n_kv, d_k]
    vh = v.transpose(0, 1)  # [n_head_kv, n_kv, d_v]
    if n_head_kv != n_head:
        r = n_head // n_head_kv
        kh = kh.repeat_interleave(r, dim=0)
        vh = vh.repeat_interleave(r, dim=0)
    if flash:
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)  # [n_head, n_tokens, d_v]
    else:
        kq = torch.baddbmm(mask.expand(n_head, -1, -1), qh, kh.transpose(1, 2), alpha=scale)  # [n_head, n_tokens, n_kv]
        out = torch.bmm(kq.softmax(-1), vh)  # [n_head, n_tokens, d_v]
    return out.transpose(0, 1).reshape(n_tokens, -1)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, elementwise: [n, n_ff] each."""
    return F.silu(gate) * up


def swiglu_ffn(x: torch.Tensor, gate: Linear, up: Linear, down: Linear) -> torch.Tensor:
    """x: [n, n_embd] -> down(silu(gate x) * up x): [n, n_embd]."""
    return linear(F.silu(linear(x, gate)) * linear(x, up), down)


def geglu_ffn(x: torch.Tensor, gate: Linear, up: Linear, down: Linear) -> torch.Tensor:
    """x: [n, n_embd] -> down(gelu_tanh(gate x) * up x) (Gemma)."""
    return linear(F.gelu(linear(x, gate), approximate="tanh") * linear(x, up), down)
