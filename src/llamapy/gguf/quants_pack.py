"""Reference quantizers (float32 -> GGML block bytes) for the KV-cache types.

Each `quantize_*` maps blocks [n, block_size] float32 -> [n, type_size] uint8 and is
a vectorised transcription of ggml's `quantize_row_*_ref` (ggml-quants.c), the same
arithmetic in the same order, so the bytes equal gguf.quants.quantize where that
exists (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16) and ggml's C reference for IQ4_NL.
NaN inputs are not supported (ggml's reference is not defined on them either).
"""

from __future__ import annotations

import torch

from .quants_bits import f16_bytes, pack_bits, pack_nibbles

KVALUES_IQ4NL = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
GROUP_MAX_EPS = 1e-15  # ggml-quants.c: below this a block's amax counts as zero
IQ4_NL_NTRY = 7  # quantize_iq4_nl() passes ntry=7 to quantize_row_iq4_nl_impl()


def roundf(x: torch.Tensor) -> torch.Tensor:
    """C roundf: half away from zero (torch.round rounds half to even)."""
    a = x.abs()
    fl = a.floor()
    return torch.sign(x) * (fl + (a - fl >= 0.5).to(x.dtype))


def _div(a: torch.Tensor, b: float) -> torch.Tensor:
    """a / b, correctly rounded on every device (CUDA turns division by a Python scalar into a * (1/b))."""
    return a / torch.full((), b, dtype=a.dtype, device=a.device)


def _inv(d: torch.Tensor) -> torch.Tensor:
    """`d ? 1.0f/d : 0.0f`"""
    return torch.where(d == 0, torch.zeros_like(d), 1.0 / d)


def _absmax_signed(x: torch.Tensor) -> torch.Tensor:
    """[n, bs] -> [n, 1]: the element of largest magnitude, sign kept, first one on ties."""
    return torch.gather(x, -1, x.abs().argmax(dim=-1, keepdim=True))


def quantize_bf16(x: torch.Tensor) -> torch.Tensor:
    """[...] float32 -> [..., 2] uint8, as ggml_compute_fp32_to_bf16 (RNE, NaN forced quiet)."""
    n = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    nan = (n & 0x7FFFFFFF) > 0x7F800000
    n = torch.where(nan, (n & 0xFFFF0000) | (64 << 16), n)
    n = (n + (0x7FFF + ((n >> 16) & 1))) >> 16
    return torch.stack((n & 0xFF, (n >> 8) & 0xFF), dim=-1).to(torch.uint8)


def quantize_q8_0(x: torch.Tensor) -> torch.Tensor:
    """[n, 32] -> [n, 34]: d = amax/127, q = roundf(x/d)."""
    d = _div(x.abs().amax(dim=-1, keepdim=True), 127)
    q = roundf(x * _inv(d)).to(torch.int8).view(torch.uint8)
    return torch.cat((f16_bytes(d), q), dim=-1)


def quantize_q4_0(x: torch.Tensor) -> torch.Tensor:
    """[n, 32] -> [n, 18]: d = max/-8, q = min(15, (int)(x/d + 8.5))."""
    d = _div(_absmax_signed(x), -8)
    q = torch.trunc(x * _inv(d) + 8.5).clamp(0, 15).to(torch.uint8)
    return torch.cat((f16_bytes(d), pack_nibbles(q, 16)), dim=-1)


def quantize_q4_1(x: torch.Tensor) -> torch.Tensor:
    """[n, 32] -> [n, 20]: d = (max-min)/15, m = min, q = min(15, (int)((x-min)/d + 0.5))."""
    mn = x.amin(dim=-1, keepdim=True)
    d = _div(x.amax(dim=-1, keepdim=True) - mn, 15)
    q = torch.trunc((x - mn) * _inv(d) + 0.5).clamp(0, 15).to(torch.uint8)
    return torch.cat((f16_bytes(d), f16_bytes(mn), pack_nibbles(q, 16)), dim=-1)


def _pack_q5(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, 32] values 0..31 -> (qh [n, 4] fifth bits as a little-endian u32, qs [n, 16] nibbles)."""
    return pack_bits(q >> 4), pack_nibbles(q & 0x0F, 16)


def quantize_q5_0(x: torch.Tensor) -> torch.Tensor:
    """[n, 32] -> [n, 22]: d = max/-16, q = min(31, (int)(x/d + 16.5))."""
    d = _div(_absmax_signed(x), -16)
    q = torch.trunc(x * _inv(d) + 16.5).clamp(0, 31).to(torch.uint8)
    qh, qs = _pack_q5(q)
    return torch.cat((f16_bytes(d), qh, qs), dim=-1)


def quantize_q5_1(x: torch.Tensor) -> torch.Tensor:
    """[n, 32] -> [n, 24]: d = (max-min)/31, m = min, q = min(31, (int)((x-min)/d + 0.5))."""
    mn = x.amin(dim=-1, keepdim=True)
    d = _div(x.amax(dim=-1, keepdim=True) - mn, 31)
    q = torch.trunc((x - mn) * _inv(d) + 0.5).clamp(0, 31).to(torch.uint8)
    qh, qs = _pack_q5(q)
    return torch.cat((f16_bytes(d), f16_bytes(mn), qh, qs), dim=-1)


def iq4_nl_index_table(device: torch.device | str = "cpu") -> torch.Tensor:
    """[512] int32: best_index_int8(kvalues_iq4nl, x) for every x with floor(2x) = k - 256.

    best_index_int8 picks the lower neighbour iff x - lo < hi - x, i.e. iff x is below
    the midpoint (lo + hi) / 2. Every midpoint is a multiple of 0.5 and x - lo, hi - x are
    exact near it, so the answer depends only on floor(2x); below -128 it is 0, from 128 up 15.
    """
    mids2 = [a + b for a, b in zip(KVALUES_IQ4NL, KVALUES_IQ4NL[1:])]  # 2 * midpoints, integers
    k2 = torch.arange(-256, 256)  # floor(2x)
    return sum((k2 >= m).int() for m in mids2).to(device=device, dtype=torch.int32)


def lookup_iq4nl(x2: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """table[best_index_int8(16, kvalues_iq4nl, x)] elementwise, given x2 = 2*x (consumed in place).

    `table` is iq4_nl_index_table() (-> indices) or kvalues indexed by it (-> values).
    NaN maps to index 15, as in the C search.
    """
    k = x2.nan_to_num_(nan=1e9).floor_().clamp_(-256, 255).add_(256).to(torch.int32)
    return table.index_select(0, k.reshape(-1)).reshape(k.shape)


def _weighted_sums(x: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [32, n], q [T, 32, n] -> (sum_j (w*q)*x, sum_j (w*q)*q) with w = x*x, each [T, n].

    Accumulated j = 0..31 in fp32, left to right, as the C loop does (no FMA).
    """
    wq = (x * x) * q
    tqx, tq2 = wq * x, wq * q
    sumqx, sumq2 = torch.zeros_like(tqx[:, 0]), torch.zeros_like(tq2[:, 0])
    for j in range(x.shape[0]):
        sumqx += tqx[:, j]
        sumq2 += tq2[:, j]
    return sumqx, sumq2


def iq4_nl_scale(x: torch.Tensor, values: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """quantize_row_iq4_nl_impl's scale search (no importance weights, ntry=7): [n, 32] -> [n] fp32."""
    mx = _absmax_signed(x)[:, 0]  # [n]
    ntry = IQ4_NL_NTRY
    tries = torch.arange(-ntry, ntry + 1, dtype=torch.float32, device=x.device) + values[0]  # [2*ntry+1]
    d0 = -mx / values[0]
    ids = torch.cat(((1.0 / d0)[None], tries[:, None] / mx), dim=0)  # [T, n]: the first pass, then each try
    xt = x.t().contiguous()  # [32, n]
    q = lookup_iq4nl(xt * (2 * ids)[:, None, :], values[table])  # [T, 32, n]; (2*id)*x == 2*(id*x) exactly
    sumqx, sumq2 = _weighted_sums(xt, q)  # [T, n]
    d = sumqx[0] / sumq2[0]
    best = d * sumqx[0]
    for t in range(1, ids.shape[0]):
        sqx, sq2 = sumqx[t], sumq2[t]
        better = (sq2 > 0) & (sqx * sqx > best * sq2)
        d = torch.where(better, sqx / sq2, d)
        best = torch.where(better, d * sqx, best)
    return torch.where(mx.abs() < GROUP_MAX_EPS, torch.zeros_like(d), d)


def quantize_iq4_nl(x: torch.Tensor) -> torch.Tensor:
    """[n, 32] -> [n, 18]: fp16 scale from iq4_nl_scale(), then the nearest kvalues index per element."""
    values = torch.tensor(KVALUES_IQ4NL, dtype=torch.float32, device=x.device)
    table = iq4_nl_index_table(x.device)
    d = iq4_nl_scale(x, values, table)[:, None]  # [n, 1]
    q = lookup_iq4nl((2 * _inv(d)) * x, table).to(torch.uint8)
    return torch.cat((f16_bytes(d), pack_nibbles(q, 16)), dim=-1)
