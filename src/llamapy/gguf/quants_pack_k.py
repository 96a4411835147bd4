"""Reference quantizer for Q6_K (float32 -> GGML block bytes), which the `gguf` package cannot
write: llama-quantize stores a model's output matrix as Q6_K in the Q4_0 .. Q5_1 mixes
(quantize.py).  A vectorised transcription of ggml's `quantize_row_q6_K_ref` with
`make_qx_quants(16, 32, x, L, rmse_type=1)` for each 16-group's scale (ggml-quants.c): the
same search, op for op in float32: each group's sums accumulated left to right as the C loop
(libggml-base has no FMA contraction), the levels of the winning trial kept where a group's
6-bit scale rounds to 0 (ggml's `if (!d) continue;`), so the bytes equal llama-quantize's
(tests/test_quantize_k.py).
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


def make_qx_quants(x: torch.Tensor, nmax: int) -> tuple[torch.Tensor, torch.Tensor]:
    """make_qx_quants(n, nmax, x, L, rmse_type=1, NULL) for each group x[:, g] (x [n, G] float32,
    element first): (L [n, G] levels 0 .. 2 nmax - 1 of the best trial, scale [G]); weights x^2,
    the best of 19 trial inverse scales; each sum accumulated left to right as the C loop."""
    mx = x[0].clone()
    amax = x[0].abs()
    for i in range(1, x.shape[0]):  # the first of largest magnitude, sign kept (strict `>`)
        bigger = x[i].abs() > amax
        mx = torch.where(bigger, x[i], mx)
        amax = torch.where(bigger, x[i].abs(), amax)
    zero = amax < GROUP_MAX_EPS
    mx = torch.where(zero, torch.ones_like(mx), mx)

    def trial(iscale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        l = torch.round(iscale * x).clamp(-nmax, nmax - 1)  # nearest_int: half to even
        sumlx, suml2 = torch.zeros_like(mx), torch.zeros_like(mx)
        for i in range(x.shape[0]):
            w = x[i] * x[i]
            sumlx += (w * x[i]) * l[i]
            suml2 += (w * l[i]) * l[i]
        return l, sumlx, suml2

    L, sumlx, suml2 = trial(torch.tensor(-float(nmax)) / mx)
    scale = torch.where(suml2 != 0, sumlx / torch.where(suml2 != 0, suml2, torch.ones_like(suml2)),
                        torch.zeros_like(sumlx))
    best = scale * sumlx
    tenth = torch.tensor(0.1, dtype=torch.float32)
    for step in range(-9, 10):
        if step == 0:
            continue
        l, sumlx, suml2 = trial(-(nmax + tenth * step) / mx)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        L = torch.where(better, l, L)
        scale = torch.where(better, sumlx / suml2.clamp_min(1e-30), scale)
        best = torch.where(better, scale * sumlx, best)
    L = torch.where(zero, torch.zeros_like(L), L + nmax)
    return L, torch.where(zero, torch.zeros_like(scale), scale)


def quantize_q6_k(x: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Blocks x [n, 256] float32 -> [n, 210] uint8 in block_q6_K's layout (ql[128], qh[64],
    scales[16] int8, d f16), `chunk` blocks at a time (the search's temporaries are ~30 floats
    an element)."""
    x = x.to(torch.float32).reshape(-1, QK_K)
    if x.shape[0] > chunk:
        return torch.cat([quantize_q6_k(x[i : i + chunk], chunk) for i in range(0, x.shape[0], chunk)])
    n = x.shape[0]
    L0, scales = make_qx_quants(x.reshape(n * 16, 16).t().contiguous(), 32)  # [16, n * 16], [n * 16]
    L0 = L0.t().reshape(n, QK_K)  # the search's levels, kept where a group's d is 0
    scales = scales.reshape(n, 16)
    max_scale = _signed_max(scales)  # [n]
    empty = max_scale.abs() < GROUP_MAX_EPS
    iscale = torch.tensor(-128.0) / torch.where(empty, torch.ones_like(max_scale), max_scale)
    d = torch.where(empty, torch.zeros_like(iscale), torch.tensor(1.0) / iscale).to(torch.float16)  # [n]
    sc = torch.round(iscale.unsqueeze(-1) * scales).clamp(-128, 127)
    sc = torch.where(empty.unsqueeze(-1), torch.zeros_like(sc), sc)  # [n, 16]
    dq = (d.to(torch.float32).unsqueeze(-1) * sc).repeat_interleave(16, dim=-1)  # [n, 256]
    safe = torch.where(dq == 0, torch.ones_like(dq), dq)
    L = torch.where(dq == 0, L0, torch.round(x / safe).clamp(-32, 31) + 32).to(torch.int32)
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
