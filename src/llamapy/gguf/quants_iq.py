"""IQ4_XS and MXFP4 blocks <-> float32, op for op as gguf.quants (ggml-quants.c's references).

IQ4_XS (256 elements, 136 bytes): d f16 | scales_h u16 | scales_l[4] | qs[128]; sub-block j
of 32 has the 6-bit scale ls = (scales_l nibble j) | (2 bits j of scales_h) << 4, value
d * (ls - 32) * kvalues_iq4nl[q] (q: qs[16 j .. 16 j + 16] low nibbles, then high ones).
MXFP4 (32 elements, 17 bytes): e E8M0 | qs[16]; value e8m0_to_fp32_half(e) * kvalues_mxfp4[q],
the E2M1 values doubled (ggml_e8m0_to_fp32_half halves the scale to match).

quantize_iq4_xs is ggml's quantize_row_iq4_xs_ref (quantize_row_iq4_nl_impl with super-blocks
of 256, no importance weights, ntry 7), which gguf.quants lacks.

dequantize_* / quantize_* map blocks [n, type_size] uint8 <-> [n, block_size] float32.
"""
from __future__ import annotations

import torch

from .quants_bits import f16, f16_bytes, nibbles, pack_nibbles, table_lookup
from .quants_pack import KVALUES_IQ4NL, _absmax_signed, _inv, iq4_nl_index_table, iq4_nl_scale, lookup_iq4nl

KVALUES_MXFP4 = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)  # ggml-common.h kvalues_mxfp4
E8M0_BIAS = 127


def dequantize_iq4_xs(b: torch.Tensor) -> torch.Tensor:
    """[n, 136] -> [n, 256] (gguf.quants.IQ4_XS.dequantize_blocks, dequantize_row_iq4_xs)."""
    n = b.shape[0]
    d = f16(b[:, 0:2])  # [n, 1]
    sh = b[:, 2:4].to(torch.int32)
    scales_h = sh[:, 0] | (sh[:, 1] << 8)  # u16, little-endian
    shifts = torch.arange(0, 16, 2, dtype=torch.int32, device=b.device)
    hi = (scales_h[:, None] >> shifts) & 3  # [n, 8]
    # byte i of scales_l -> sub-blocks 2i (low nibble), 2i + 1 (high)
    lo = torch.stack((b[:, 4:8] & 0x0F, b[:, 4:8] >> 4), dim=-1).reshape(n, 8).to(torch.int32)
    ls = (lo | (hi << 4)) - 32
    dl = (d * ls.float()).reshape(n, 8, 1)
    q = nibbles(b[:, 8:], 16).reshape(n, 8, 32)
    return (dl * table_lookup(KVALUES_IQ4NL, q)).reshape(n, 256)


def e8m0_to_fp32_half(e: torch.Tensor) -> torch.Tensor:
    """ggml_e8m0_to_fp32_half: 2^(e - 128) as float32, subnormal for e < 2 (uint8 -> float32, same shape)."""
    x = e.to(torch.int32)
    bits = torch.where(x < 2, torch.full_like(x, 0x00200000) << x, (x - 1) << 23)
    return bits.view(torch.float32)


def dequantize_mxfp4(b: torch.Tensor) -> torch.Tensor:
    """[n, 17] -> [n, 32] (gguf.quants.MXFP4.dequantize_blocks, dequantize_row_mxfp4)."""
    return e8m0_to_fp32_half(b[:, 0:1]) * table_lookup(KVALUES_MXFP4, nibbles(b[:, 1:], 16))


def quantize_mxfp4(x: torch.Tensor) -> torch.Tensor:
    """[n, 32] float32 -> [n, 17] (gguf.quants.MXFP4.quantize_blocks): e = floor(log2(amax)) - 2 + 127
    (0 for an all-zero block), each value the nearest kvalue * scale, the first on ties."""
    n = x.shape[0]
    amax = x.abs().amax(dim=-1, keepdim=True)
    e = torch.where(amax > 0, torch.floor(torch.log2(amax)) - 2 + E8M0_BIAS, torch.zeros_like(amax))
    e = e.to(torch.int32).to(torch.uint8)  # numpy's astype(uint8) on float32: through int, wrapping
    d = e8m0_to_fp32_half(e)  # [n, 1]
    kv = torch.tensor(KVALUES_MXFP4, dtype=torch.float32, device=x.device)
    errs = (d.reshape(n, 1, 1) * kv - x.reshape(n, 32, 1)).abs()
    best = errs.argmin(dim=-1).to(torch.uint8)  # [n, 32]
    qs = best[:, :16] | (best[:, 16:] << 4)
    return torch.cat((e, qs), dim=-1)


def quantize_iq4_xs(x: torch.Tensor) -> torch.Tensor:
    """[n, 256] float32 -> [n, 136]: each sub-block's scale searched as IQ4_NL's (iq4_nl_scale), the
    super-block d = -(the scale of largest magnitude) / 32, each sub-scale rounded (half to even, as
    ggml's nearest_int) to l in -32..31, the indices searched again with d * l (fp32 d; stored f16)."""
    n = x.shape[0]
    values = torch.tensor(KVALUES_IQ4NL, dtype=torch.float32, device=x.device)
    table = iq4_nl_index_table(x.device)
    xb = x.reshape(n * 8, 32)
    scales = iq4_nl_scale(xb, values, table).reshape(n, 8)
    d = -_absmax_signed(scales) / 32  # [n, 1]; -0.0 for an all-zero super-block, as in C
    ls = torch.round(_inv(d) * scales).clamp_(-32, 31)  # [n, 8]
    dl = (d * ls).reshape(n * 8, 1)
    q = lookup_iq4nl((2 * _inv(dl)) * xb, table).to(torch.uint8).reshape(n, 256)  # (2*idl)*x == 2*(idl*x)
    l = (ls + 32).to(torch.int32)  # 0..63
    lo = (l & 15).to(torch.uint8)
    scales_l = lo[:, 0::2] | (lo[:, 1::2] << 4)  # [n, 4]
    shifts = torch.arange(0, 16, 2, dtype=torch.int32, device=x.device)
    sh = ((l >> 4) << shifts).sum(dim=-1, dtype=torch.int32)  # [n]: disjoint bits
    scales_h = torch.stack((sh & 0xFF, sh >> 8), dim=-1).to(torch.uint8)
    return torch.cat((f16_bytes(d), scales_h, scales_l, pack_nibbles(q, 16)), dim=-1)
