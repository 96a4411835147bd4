"""Row-wise building blocks shared by architectures, plus the one op that reads across
rows: attention, which consults the KQ mask."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels import ops as kops
from ..kernels.ops import row_lib
from .block_matrix import BlockMatrix
from .qmatrix import StackedMatrix


def takes_out(m) -> bool:
    """Does m(x, out) write its product into a given `out` (contiguous float32 [n, n_out])?"""
    return isinstance(m, (BlockMatrix, StackedMatrix))


def project(m, x: torch.Tensor, out: torch.Tensor | None, deterministic: bool = False) -> torch.Tensor:
    """The product m(x) [n, n_out], written into `out` where m can (takes_out: a caller's reused
    logits buffer, the context's kept gate|up buffer), else a new tensor.  deterministic: every row
    the one-row product's (BlockMatrix.det; only asked where det_covered, Context._det_rows)."""
    if deterministic and isinstance(m, BlockMatrix) and m.det_covered:
        return m.det(x, out)
    return m(x, out) if out is not None and takes_out(m) else m(x)


def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x: [..., n] -> x / sqrt(mean(x^2) + eps) * w   (ggml_rms_norm then ggml_mul), a new
    tensor.  On the CPU the kernel's one pass (rows of any count and shape, e.g. Gemma 3's
    per-head norms of [n_tokens, n_head, d]); elsewhere PyTorch's."""
    lib = row_lib(x)
    if lib is not None:
        return kops.rms_norm(lib, x.reshape(-1, x.shape[-1]), w, eps).view(x.shape)
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def rms_norm_add_(x: torch.Tensor, w: torch.Tensor | None, eps: float, acc: torch.Tensor) -> torch.Tensor:
    """acc += rms_norm(x, w, eps) in place (Gemma's post-norms and their residual add; x, a
    temporary, may be overwritten): on the CPU one kernel pass, the same values.  Returns acc."""
    lib = row_lib(x)
    if lib is not None and x.dim() == 2 and x.stride(1) == 1 and acc.is_contiguous() and acc.dtype == torch.float32:
        return kops.rms_norm_add_(lib, x, w, eps, acc)
    return acc.add_(rms_norm(x, w, eps))


def qkv_split(m, x: torch.Tensor, n_q: int, n_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Q|K|V product m(x) as (q [n, n_q], k [n, n_k], v [n, rest]): a StackedMatrix of
    the three (Q, K, V of different types) gives its parts' products as they are (no
    concatenation, each contiguous), one matrix column views of its product."""
    if isinstance(m, StackedMatrix) and [p.n_out for p in m.parts[:2]] == [n_q, n_k] and len(m.parts) == 3:
        q, k, v = (p(x) for p in m.parts)
        return q, k, v
    y = m(x)
    return y[:, :n_q], y[:, n_q : n_q + n_k], y[:, n_q + n_k :]


FLASH_SCORE_BYTES = 4 * 1024 * 1024  # flash: query rows per SDPA call keep its scores under this
FLASH_Q_BLOCK = 128  # flash: at most this many query rows per SDPA call (see attention)


def softcap_(kq: torch.Tensor, softcap: float) -> torch.Tensor:
    """kq = tanh(kq / softcap) * softcap in place (Gemma 2's attention-logit soft-capping,
    llama.cpp build_attn_mha: on the scaled KQ, before the mask)."""
    return kq.div_(softcap).tanh_().mul_(softcap)


def softmax_sinks(kq: torch.Tensor, sinks: torch.Tensor | None, head_dim: int) -> torch.Tensor:
    """Softmax over the last dim of kq, with each head's sink logit sinks[h] (gpt-oss's
    attn_sinks, not scaled) in the normalisation as one more column whose value is dropped
    (ggml_soft_max_add_sinks: the max taken with it, exp(sink - max) added to the sum).  With
    sinks, kq is overwritten (no second KQ-sized buffer).  head_dim: kq's dimension of the heads."""
    if sinks is None:
        return kq.softmax(-1)
    shape = [1] * kq.dim()
    shape[head_dim] = sinks.shape[0]
    sk = sinks.view(shape)  # broadcast over kq's rows
    m = torch.maximum(kq.amax(-1, keepdim=True), sk)  # [..., 1]
    kq.sub_(m).exp_()
    return kq.div_(kq.sum(-1, keepdim=True).add_((sk - m).exp_()))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
              flash: bool = True, softcap: float = 0.0, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Grouped-query attention through an additive mask.

    flash: SDPA (PyTorch's fused CPU kernel: scores in small tiles, K/V heads shared by
    enable_gqa, never repeated) over blocks of at most FLASH_Q_BLOCK query rows and
    FLASH_SCORE_BYTES of scores, whatever n_ubatch and n_kv are; each block reads only the
    cells from the first to the last one any of its rows can see (SDPA's CPU kernel does not
    skip masked tiles: a 512-token prompt's causal mask in blocks of 128 reads 5/8 of the
    scores, and a sliding window's early cells are skipped too).  Otherwise (-fa off) KQ = q·kᵀ·scale + mask
    [n_head, n_tokens, n_kv] is materialized whole, softmaxed, and multiplied by v.

    q: [n_tokens, n_head, d_k]; k: [n_kv, n_head_kv, d_k]; v: [n_kv, n_head_kv, d_v];
    mask: [n_tokens, n_kv] (0 or -inf).  Query head h reads KV head h // r, ggml's broadcast.
    softcap > 0: the scaled KQ is soft-capped before the mask; sinks [n_head] (gpt-oss): one
    more logit per head in the softmax (softmax_sinks); both always materialized (SDPA has no
    such step).  Returns [n_tokens, n_head * d_v]."""
    n_tokens, n_head, d_k = q.shape
    n_kv, n_head_kv, d_v = v.shape
    r = n_head // n_head_kv
    kh = k.transpose(0, 1)  # [n_head_kv, n_kv, d_k]
    vh = v.transpose(0, 1)  # [n_head_kv, n_kv, d_v]
    qh = q.transpose(0, 1)  # [n_head, n_tokens, d_k]
    if not flash or softcap or (sinks is not None and q.device.type != "cpu"):
        if r > 1:
            kh, vh = kh.repeat_interleave(r, dim=0), vh.repeat_interleave(r, dim=0)
        if softcap:
            kq = softcap_(torch.bmm(qh, kh.transpose(1, 2)).mul_(scale), softcap).add_(mask)
        else:
            kq = torch.baddbmm(mask.expand(n_head, -1, -1), qh, kh.transpose(1, 2), alpha=scale)  # [n_head, n_tokens, n_kv]
        return torch.bmm(softmax_sinks(kq, sinks, 0), vh).transpose(0, 1).reshape(n_tokens, -1)
    step = max(1, min(FLASH_Q_BLOCK, FLASH_SCORE_BYTES // (4 * n_head * n_kv)))
    if step >= n_tokens:
        o = _sdpa(qh[None], kh[None], vh[None], mask, scale, r > 1, sinks)
        return o[0].transpose(0, 1).reshape(n_tokens, n_head * d_v)  # [n_tokens, n_head * d_v]
    out = torch.empty(n_tokens, n_head, d_v, dtype=q.dtype, device=q.device)
    seen = (mask != float("-inf")).view(-1, n_kv)
    for i in range(0, n_tokens, step):
        cols = torch.nonzero(seen[i : i + step].any(0))
        c0, c1 = (int(cols[0]), int(cols[-1]) + 1) if len(cols) else (0, 1)  # a block that sees nothing: one cell, all -inf
        ob = _sdpa(qh[None, :, i : i + step], kh[None, :, c0:c1], vh[None, :, c0:c1], mask[i : i + step, c0:c1], scale,
                   r > 1, sinks)  # [1, n_head, rows, d_v]
        out[i : i + step] = ob[0].transpose(0, 1)
    return out.reshape(n_tokens, n_head * d_v)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, gqa: bool,
          sinks: torch.Tensor | None) -> torch.Tensor:
    """SDPA of q [B, n_head, rows, d_k] over k, v [B, n_head_kv, n_kv, d] through mask [rows,
    n_kv] (or [B, 1, rows, n_kv]).  With sinks [n_head] (CPU only): PyTorch's CPU flash kernel, which also returns each
    row's log-sum-exp L of the scores, and the output scaled by e^L / (e^L + e^sink) =
    sigmoid(L - sink), the share the sink column leaves to the cells (ggml_soft_max_add_sinks),
    so KQ is never materialized."""
    if sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask,
                                                                        scale=scale)  # lse: [B, n_head, rows]
    return o.mul_((lse - sinks[None, :, None]).sigmoid_()[..., None]).nan_to_num_(0.0)


def attention_gathered(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, take: torch.Tensor,
                       n_head_kv: int, scale: float, flash: bool = True, softcap: float = 0.0,
                       sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Attention over gathered cells (model/graph.py AttnGroup): S sequences, each with r_max
    query slots against its own c_max cells.

    q: [S * r_max, n_head, d_k] (the padded slots' queries); k: [S * c_max, n_head_kv * d_k];
    v: [S * c_max, n_head_kv * d_v]; bias: [S, r_max, c_max] (0 / -inf); take: [n] the real
    slots.  softcap > 0, sinks: as attention's.  Returns [n, n_head * d_v]."""
    S, r_max, c_max = bias.shape
    _, n_head, d_k = q.shape
    d_v = v.shape[1] // n_head_kv
    qh = q.view(S, r_max, n_head, d_k).transpose(1, 2)  # [S, n_head, r_max, d_k]
    kh = k.view(S, c_max, n_head_kv, d_k).transpose(1, 2)  # [S, n_head_kv, c_max, d_k]
    vh = v.view(S, c_max, n_head_kv, d_v).transpose(1, 2)  # [S, n_head_kv, c_max, d_v]
    if flash and not softcap and (sinks is None or q.device.type == "cpu"):
        o = _sdpa(qh, kh, vh, bias[:, None], scale, n_head > n_head_kv, sinks)
    else:  # the (small) KQ of every sequence, materialized
        r = n_head // n_head_kv
        kh, vh = kh.repeat_interleave(r, dim=1), vh.repeat_interleave(r, dim=1)
        kq = torch.matmul(qh, kh.transpose(2, 3)).mul_(scale)  # [S, n_head, r_max, c_max]
        kq = (softcap_(kq, softcap) if softcap else kq).add_(bias[:, None])
        o = torch.matmul(softmax_sinks(kq, sinks, 1), vh)
    o = o.transpose(1, 2).reshape(S * r_max, n_head * d_v)  # [S * r_max, n_head * d_v]
    return o.index_select(0, take)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, elementwise: [n, n_ff] each."""
    return F.silu(gate) * up


def glu(gate: torch.Tensor, up: torch.Tensor, gelu: bool = False) -> torch.Tensor:
    """act(gate) * up, elementwise on [n, n_ff] each: act silu (SwiGLU), or with gelu GELU's
    tanh form (Gemma's GeGLU).  On the CPU the kernel's one pass."""
    lib = row_lib(gate)
    if lib is not None and gate.dim() == 2:
        return kops.glu(lib, gate, up, gelu)
    return F.gelu(gate, approximate="tanh") * up if gelu else swiglu(gate, up)


def glu_stacked(gu: torch.Tensor, gelu: bool = False) -> torch.Tensor:
    """gu: [n, 2 n_ff], gate | up (one stacked product) -> act(gate) * up [n, n_ff]."""
    return glu(*gu.chunk(2, dim=1), gelu=gelu)

