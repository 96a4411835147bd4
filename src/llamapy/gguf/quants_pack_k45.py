"""Reference quantizers for Q4_K and Q5_K (float32 -> GGML block bytes), which the `gguf`
package cannot write: ggml's `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref` (ggml-quants.c),
what llama-quantize runs for these types without an imatrix.

Each 32-element sub-block gets a scale and a min from `make_qkx2_quants` (weights
av_x + |x|, av_x the sub-block's RMS): the min/max starting point, then nstep + 1 trial
inverse scales (rmin + rdelta * is + nmax) / (max - min), each refit by weighted least squares
and kept when its weighted squared error is smaller.  The 8 scales and 8 mins of a 256
super-block are then stored as 6-bit multiples of d = max_scale / 63 and dmin = max_min / 63
(fp16), and every element requantized with them.

Op for op in float32: the 32 elements of a sub-block are accumulated left to right, as the C
loop does (libggml-base is built without FMA contraction: `objdump` of quantize_row_q5_K_ref
shows no vfmadd), so the bytes equal llama-quantize's (tests/test_quantize_k.py).  Vectorised
over sub-blocks: tensors here are [32, G], element index first.  Scalars enter as float32
tensors (a Python number on the left of `/` would make torch multiply by a reciprocal), and
sqrtf is taken in float64 (torch's vectorised float32 sqrt is not correctly rounded: 14% of
random inputs differ by an ulp; a double sqrt rounded to float is sqrtf's result).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .quants_bits import f16_bytes

QK_K = 256
F32 = torch.float32


@dataclass(frozen=True, slots=True)
class Qkx2Params:
    """make_qkx2_quants' arguments for one block type."""
    nmax: int
    rmin: float
    rdelta: float
    nstep: int


Q4_K_SEARCH = Qkx2Params(nmax=15, rmin=-1.0, rdelta=0.1, nstep=20)
Q5_K_SEARCH = Qkx2Params(nmax=31, rmin=-0.5, rdelta=0.1, nstep=15)


def _c(v: float, like: torch.Tensor) -> torch.Tensor:
    """v as a float32 scalar tensor (C's float constant)."""
    return torch.tensor(v, dtype=F32, device=like.device)


def _weighted_error(scale: torch.Tensor, mn: torch.Tensor, L: torch.Tensor, x: torch.Tensor,
                    w: torch.Tensor) -> torch.Tensor:
    """sum_i w[i] * (scale * L[i] + min - x[i])^2, left to right: [G]."""
    err = torch.zeros_like(scale)
    for i in range(x.shape[0]):
        diff = scale * L[i] + mn - x[i]
        err += w[i] * (diff * diff)
    return err


def make_qkx2_quants(x: torch.Tensor, w: torch.Tensor, p: Qkx2Params) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, w [n, G] float32 -> (L [n, G] float levels 0..nmax, scale [G], the_min [G]) as ggml's
    make_qkx2_quants(n, nmax, x, w, L, &the_min, Laux, rmin, rdelta, nstep, use_mad=false)."""
    n = x.shape[0]
    mn, mx = x[0].clone(), x[0].clone()
    sum_w = w[0].clone()
    sum_x = sum_w * x[0]
    for i in range(1, n):
        mn = torch.where(x[i] < mn, x[i], mn)
        mx = torch.where(x[i] > mx, x[i], mx)
        sum_w += w[i]
        sum_x += w[i] * x[i]
    zero = torch.zeros_like(mn)
    mn = torch.where(mn > 0, zero, mn)
    flat = mx == mn  # [G]: all levels 0, scale 0
    one = torch.ones_like(mx)
    nmax = _c(float(p.nmax), x)
    iscale = nmax / torch.where(flat, one, mx - mn)
    scale = _c(1.0, x) / iscale
    L = (iscale * (x - mn)).round().clamp(0, p.nmax)  # nearest_int: half to even
    best = _weighted_error(scale, mn, L, x, w)
    for step in range(p.nstep + 1):
        r = (_c(p.rmin, x) + _c(p.rdelta, x) * _c(float(step), x)) + nmax
        # min is the best trial's so far, as in the C loop
        Laux = ((r / torch.where(flat, one, mx - mn)) * (x - mn)).round().clamp(0, p.nmax)  # [n, G]
        sum_l, sum_l2, sum_xl = zero.clone(), zero.clone(), zero.clone()
        for i in range(n):
            wl = w[i] * Laux[i]
            sum_l += wl
            sum_l2 += wl * Laux[i]
            sum_xl += wl * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        ok = D > 0
        Ds = torch.where(ok, D, torch.ones_like(D))
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / Ds
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / Ds
        pos = this_min > 0
        this_scale = torch.where(pos, sum_xl / torch.where(sum_l2 > 0, sum_l2, torch.ones_like(sum_l2)), this_scale)
        this_min = torch.where(pos, zero, this_min)
        cur = _weighted_error(this_scale, this_min, Laux, x, w)
        better = ok & (cur < best)
        L = torch.where(better, Laux, L)
        best = torch.where(better, cur, best)
        scale = torch.where(better, this_scale, scale)
        mn = torch.where(better, this_min, mn)
    L = torch.where(flat, torch.zeros_like(L), L)
    scale = torch.where(flat, zero, scale)
    return L, scale, -mn


def _scan_max(v: torch.Tensor) -> torch.Tensor:
    """ggml's `float m = 0; if (v > m) m = v;` over v [n, 8] -> [n, 1]: +0.0 unless some v > 0
    (an all-zero sub-block's min is -0.0, which a clamp would keep)."""
    m = v.amax(dim=1, keepdim=True)
    return torch.where(m > 0, m, torch.zeros_like(m))


def _levels6(v: torch.Tensor, vmax: torch.Tensor) -> torch.Tensor:
    """uint8_t l = nearest_int(63/vmax * v); MIN(63, l) (0 where vmax is not > 0): [n, 8] int."""
    inv = torch.where(vmax > 0, _c(63.0, v) / torch.where(vmax > 0, vmax, torch.ones_like(vmax)),
                      torch.zeros_like(vmax))  # [n, 1]
    return ((inv * v).round().to(torch.int64) & 0xFF).clamp(max=63)


def _pack_scales(ls: torch.Tensor, lm: torch.Tensor) -> torch.Tensor:
    """8 six-bit scales and mins [n, 8] -> the 12 bytes of scales[] (get_scale_min_k4's layout)."""
    lo = torch.cat([ls[:, :4], lm[:, :4]], dim=1)  # bytes 0..7: low 6 bits
    lo[:, :4] |= (ls[:, 4:] >> 4) << 6
    lo[:, 4:] |= (lm[:, 4:] >> 4) << 6
    hi = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)  # bytes 8..11
    return torch.cat([lo, hi], dim=1).to(torch.uint8)


def _super_block(x: torch.Tensor, p: Qkx2Params) -> tuple[torch.Tensor, torch.Tensor]:
    """x [n, 256] -> (header bytes [n, 16]: d, dmin f16 and scales[12]; levels L [n, 256] int64)."""
    n = x.shape[0]
    xs = x.reshape(n * 8, 32).t().contiguous()  # [32, G]: element first
    sum_x2 = torch.zeros_like(xs[0])
    for i in range(32):
        sum_x2 += xs[i] * xs[i]
    av_x = torch.sqrt((sum_x2 / _c(32.0, x)).double()).to(F32)  # sqrtf; torch's float32 sqrt is not exact
    w = av_x + xs.abs()
    L, scales, mins = make_qkx2_quants(xs, w, p)
    scales, mins = scales.reshape(n, 8), mins.reshape(n, 8)
    L = L.t().reshape(n, 8, 32)
    max_scale, max_min = _scan_max(scales), _scan_max(mins)  # [n, 1]
    ls, lm = _levels6(scales, max_scale), _levels6(mins, max_min)
    d16 = (max_scale / _c(63.0, x)).to(torch.float16)
    dmin16 = (max_min / _c(63.0, x)).to(torch.float16)
    d = d16.to(F32) * ls.to(F32)  # [n, 8]
    dm = dmin16.to(F32) * lm.to(F32)
    xb = x.reshape(n, 8, 32)
    keep = (d == 0).unsqueeze(-1)  # `if (!d) continue;`: make_qkx2_quants' levels stay
    safe = torch.where(d == 0, torch.ones_like(d), d).unsqueeze(-1)
    L2 = ((xb + dm.unsqueeze(-1)) / safe).round().clamp(0, p.nmax)
    L = torch.where(keep, L, L2).to(torch.int64).reshape(n, QK_K)
    head = torch.cat([f16_bytes(d16.to(F32)), f16_bytes(dmin16.to(F32)), _pack_scales(ls, lm)], dim=1)
    return head, L


def _chunks(x: torch.Tensor, chunk: int, fn) -> torch.Tensor:
    x = x.to(F32).reshape(-1, QK_K)
    if x.shape[0] <= chunk:
        return fn(x)
    return torch.cat([fn(x[i : i + chunk]) for i in range(0, x.shape[0], chunk)])


def _q4_k(x: torch.Tensor) -> torch.Tensor:
    head, L = _super_block(x, Q4_K_SEARCH)
    q = L.reshape(-1, 4, 2, 32)  # [n, 64-chunk, half, l]
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128).to(torch.uint8)
    return torch.cat([head, qs], dim=1)


def _q5_k(x: torch.Tensor) -> torch.Tensor:
    head, L = _super_block(x, Q5_K_SEARCH)
    q = L.reshape(-1, 4, 2, 32)  # [n, 64-chunk c, half h, l]: element 64 c + 32 h + l
    lo, hi = q & 0xF, q >> 4
    qs = (lo[:, :, 0] | (lo[:, :, 1] << 4)).reshape(-1, 128).to(torch.uint8)
    bits = hi.permute(0, 3, 1, 2).reshape(-1, 32, 8)  # [n, l, 2 c + h]
    shifts = torch.arange(8, device=x.device)
    qh = (bits << shifts).sum(-1).to(torch.uint8)  # qh[l] bit 2c+h
    return torch.cat([head, qh, qs], dim=1)


def quantize_q4_k(x: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Blocks x [n, 256] float32 -> [n, 144] uint8, block_q4_K (d, dmin f16, scales[12], qs[128])."""
    return _chunks(x, chunk, _q4_k)


def quantize_q5_k(x: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Blocks x [n, 256] float32 -> [n, 176] uint8, block_q5_K (d, dmin f16, scales[12], qh[32], qs[128])."""
    return _chunks(x, chunk, _q5_k)
