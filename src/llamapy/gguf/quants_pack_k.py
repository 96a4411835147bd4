"""Reference quantizer for Q6_K (float32 -> GGML block bytes), which the `gguf` package cannot
write: llama-quantize stores a model's output matrix as Q6_K in the Q4_0 .. Q5_1 mixes
(quantize.py).  A vectorised transcription of ggml's `quantize_row_q6_K_ref` with
`make_qx_quants(16, 32, x, L, rmse_type=1)` for each 16-group's scale (ggml-quants.c): the
same search, in float32.  Sums run in torch's order, not ggml's loop's (which the compiler may
also fuse into multiply-adds), so where two trial scales tie to float rounding another one may
win: against llama-quantize's Q6_K output matrices of two random tiny models (n_embd 256 and
1024), 96-97% of the blocks were byte-identical; the others took another trial scale, which
moves their elements by up to a level.
"""

from __future__ import annotations

import torch

from .quants_bits import f16_bytes
from .quants_pack import GROUP_MAX_EPS

QK_K = 256


def _signed_max(x: torch.Tensor) -> torch.Tensor:
    """The element of largest magnitude along the last dimension, sign kept (the first one on a tie,
    as ggml's strict `>` scan)."""
    return x.gather(-1, x.abs().argmax(-1, keepdim=True)).squeeze(-1)


def make_qx_scales(x: torch.Tensor, nmax: int) -> torch.Tensor:
    """make_qx_quants(n, nmax, x, L, rmse_type=1)'s returned scale for each group x[..., :]
    (float32): levels l in [-nmax, nmax - 1], weights x^2, the best of 19 trial inverse scales."""
    mx = _signed_max(x)  # [...]
    zero = mx.abs() < GROUP_MAX_EPS
    mx = torch.where(zero, torch.ones_like(mx), mx)
    w = x * x

    def trial(iscale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        l = torch.round(iscale.unsqueeze(-1) * x).clamp(-nmax, nmax - 1)  # nearest_int: half to even
        return (w * x * l).sum(-1), (w * l * l).sum(-1)

    sumlx, suml2 = trial(-nmax / mx)
    scale = torch.where(suml2 > 0, sumlx / suml2.clamp_min(1e-30), torch.zeros_like(sumlx))
    best = scale * sumlx
    tenth = torch.tensor(0.1, dtype=torch.float32)
    for step in range(-9, 10):
        if step == 0:
            continue
        sumlx, suml2 = trial(-(nmax + tenth * step) / mx)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        scale = torch.where(better, sumlx / suml2.clamp_min(1e-30), scale)
        best = torch.where(better, scale * sumlx, best)
    return torch.where(zero, torch.zeros_like(scale), scale)


def quantize_q6_k(x: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Blocks x [n, 256] float32 -> [n, 210] uint8 in block_q6_K's layout (ql[128], qh[64],
    scales[16] int8, d f16), `chunk` blocks at a time (the search's temporaries are ~30 floats
    an element)."""
    x = x.to(torch.float32).reshape(-1, QK_K)
    if x.shape[0] > chunk:
        return torch.cat([quantize_q6_k(x[i : i + chunk], chunk) for i in range(0, x.shape[0], chunk)])
    n = x.shape[0]
    scales = make_qx_scales(x.reshape(n, QK_K // 16, 16), 32)  # [n, 16]
    max_scale = _signed_max(scales)  # [n]
    empty = max_scale.abs() < GROUP_MAX_EPS
    iscale = -128.0 / torch.where(empty, torch.ones_like(max_scale), max_scale)
    d = torch.where(empty, torch.zeros_like(iscale), 1.0 / iscale).to(torch.float16)  # [n]
    sc = torch.round(iscale.unsqueeze(-1) * scales).clamp(-128, 127)
    sc = torch.where(empty.unsqueeze(-1), torch.zeros_like(sc), sc)  # [n, 16]
    dq = (d.to(torch.float32).unsqueeze(-1) * sc).repeat_interleave(16, dim=-1)  # [n, 256]
    safe = torch.where(dq == 0, torch.ones_like(dq), dq)
    L = torch.where(dq == 0, torch.zeros_like(x), torch.round(x / safe).clamp(-32, 31)).to(torch.int32) + 32
    L = L.reshape(n, 2, 4, 32)  # [n, half, quarter, l]: element 128 h + 32 q + l
    lo, hi = L & 0xF, L >> 4
    ql = torch.cat([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], dim=-1)  # [n, 2, 64]
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)  # [n, 2, 32]
    return torch.cat([
        ql.reshape(n, 128).to(torch.uint8),
        qh.reshape(n, 64).to(torch.uint8),
        sc.to(torch.int8).view(torch.uint8),
        f16_bytes(d.to(torch.float32).unsqueeze(-1)),
    ], dim=-1)
