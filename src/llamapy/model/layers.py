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


FLASH_SCORE_BYTES = 4 * 1024 * 1024  # flash: query rows per SDPA call keep its scores under this


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
              flash: bool = True) -> torch.Tensor:
    """Grouped-query attention through an additive mask.

    flash: SDPA over blocks of query rows, so at most FLASH_SCORE_BYTES of scores live at once
    (PyTorch's CPU SDPA materializes them when given a mask), whatever n_ubatch and n_kv are;
    the r = n_head / n_head_kv query heads that share a KV head ride as extra rows of one
    SDPA head, so K and V are never repeated.  Otherwise (-fa off) KQ = q·kᵀ·scale + mask
    [n_head, n_tokens, n_kv] is materialized whole, softmaxed, and multiplied by v.

    q: [n_tokens, n_head, d_k]; k: [n_kv, n_head_kv, d_k]; v: [n_kv, n_head_kv, d_v];
    mask: [n_tokens, n_kv] (0 or -inf).  Query head h reads KV head h // r, ggml's broadcast.
    Returns [n_tokens, n_head * d_v]."""
    n_tokens, n_head, d_k = q.shape
    n_kv, n_head_kv, d_v = v.shape
    r = n_head // n_head_kv
    kh = k.transpose(0, 1)  # [n_head_kv, n_kv, d_k]
    vh = v.transpose(0, 1)  # [n_head_kv, n_kv, d_v]
    if not flash:
        qh = q.transpose(0, 1)  # [n_head, n_tokens, d_k]
        if r > 1:
            kh, vh = kh.repeat_interleave(r, dim=0), vh.repeat_interleave(r, dim=0)
        kq = torch.baddbmm(mask.expand(n_head, -1, -1), qh, kh.transpose(1, 2), alpha=scale)  # [n_head, n_tokens, n_kv]
        return torch.bmm(kq.softmax(-1), vh).transpose(0, 1).reshape(n_tokens, -1)
    qg = q.view(n_tokens, n_head_kv, r, d_k).permute(1, 2, 0, 3)  # [n_head_kv, r, n_tokens, d_k]
    step = max(1, FLASH_SCORE_BYTES // (4 * n_head * n_kv))
    out = torch.empty(n_tokens, n_head_kv, r, d_v, dtype=q.dtype, device=q.device)
    for i in range(0, n_tokens, step):
        m = mask[i : i + step]  # [rows, n_kv]
        rows = m.shape[0]
        qb = qg[:, :, i : i + step].reshape(n_head_kv, r * rows, d_k)
        ob = F.scaled_dot_product_attention(qb, kh, vh, attn_mask=m.repeat(r, 1), scale=scale)  # [n_head_kv, r*rows, d_v]
        out[i : i + rows] = ob.view(n_head_kv, r, rows, d_v).permute(2, 0, 1, 3)
    return out.reshape(n_tokens, n_head * d_v)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, elementwise: [n, n_ff] each."""
    return F.silu(gate) * up


def swiglu_ffn(x: torch.Tensor, gate: Linear, up: Linear, down: Linear) -> torch.Tensor:
    """x: [n, n_embd] -> down(silu(gate x) * up x): [n, n_embd]."""
    return linear(F.silu(linear(x, gate)) * linear(x, up), down)


def geglu_ffn(x: torch.Tensor, gate: Linear, up: Linear, down: Linear) -> torch.Tensor:
    """x: [n, n_embd] -> down(gelu_tanh(gate x) * up x) (Gemma)."""
    return linear(F.gelu(linear(x, gate), approximate="tanh") * linear(x, up), down)
