"""K-quant super-blocks (QK_K = 256 elements) -> torch: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.

Layouts and arithmetic follow gguf.quants (itself ggml's dequantize_row_q*_K) op for
op, so results are bit-identical to the numpy reference:

  Q4_K [144 B]: d f16 | dmin f16 | scales[12] (8 six-bit sc, 8 six-bit m) | qs[128]
      element 64*j + i      = d*sc[2j]  *  (qs[32j + i] & 15) - dmin*m[2j]     (i < 32)
      element 64*j + 32 + i = d*sc[2j+1]*  (qs[32j + i] >> 4) - dmin*m[2j+1]
  Q5_K [176 B]: as Q4_K plus qh[32] between scales and qs; bit s of qh[i] is the
      fifth bit of element 32*s + i.
  Q6_K [210 B]: ql[128] | qh[64] | scales[16] int8 | d f16; q = 6 bits - 32,
      value = d*scales[e // 16] * q.
  Q2_K [84 B]: scales[16] (low nibble sc, high nibble m) | qs[64] | d f16 | dmin f16;
      element 128*h + 32*j + i = d*sc[g] * ((qs[32h + i] >> 2j) & 3) - dmin*m[g], g = e // 16.
  Q3_K [110 B]: hmask[32] | qs[64] | scales[12] (16 six-bit values, minus 32) | d f16;
      element 128*h + 32*j + i = d*(sc[g] - 32) * (((qs[32h + i] >> 2j) & 3) - 4 * !bit(4h+j) of hmask[i]).
"""

from __future__ import annotations

import torch

from .quants_bits import bits, f16, nibbles

QK_K = 256
K_SCALE_SIZE = 12


def scale_min_k4(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack the 12-byte six-bit scale/min table of Q4_K/Q5_K: [n, 12] uint8 -> (sc, m), each [n, 8] uint8.

    Byte layout (bit 7 left): 0-3 `EEAAAAAA` (sc 0-3 + high bits of sc 4-7), 4-7 `eeaaaaaa`
    (m 0-3 + high bits of m 4-7), 8-11 `mmmmssss` (low bits of m 4-7 | sc 4-7).
    """
    n = scales.shape[0]
    s = scales.reshape(n, 3, 4)
    d, m, m_d = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat((d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)), dim=-1)
    mn = torch.cat((m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)), dim=-1)
    return sc, mn


def q4_k_affine(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_K blocks [n, 144] -> (q [n, 8, 32] uint8, scale [n, 8, 1] f32, neg_min [n, 8, 1] f32).

    Each 32-element sub-block is affine: value = scale * q - neg_min, with
    scale = d * sc and neg_min = dmin * m rounded to fp32 exactly as ggml does.
    """
    n = blocks.shape[0]
    d = f16(blocks[:, 0:2])  # [n, 1]
    dmin = f16(blocks[:, 2:4])
    sc, m = scale_min_k4(blocks[:, 4:16])
    scale = (d * sc.float()).reshape(n, 8, 1)
    neg_min = (dmin * m.float()).reshape(n, 8, 1)
    q = nibbles(blocks[:, 16:144], 32).reshape(n, 8, 32)
    return q, scale, neg_min


def dequantize_q4_k(blocks: torch.Tensor) -> torch.Tensor:
    """[n, 144] uint8 -> [n, 256] float32."""
    q, scale, neg_min = q4_k_affine(blocks)
    return (scale * q.float() - neg_min).reshape(-1, QK_K)


def dequantize_q5_k(blocks: torch.Tensor) -> torch.Tensor:
    """[n, 176] uint8 -> [n, 256] float32."""
    n = blocks.shape[0]
    d = f16(blocks[:, 0:2])
    dmin = f16(blocks[:, 2:4])
    sc, m = scale_min_k4(blocks[:, 4:16])
    scale = (d * sc.float()).reshape(n, 8, 1)
    neg_min = (dmin * m.float()).reshape(n, 8, 1)
    ql = nibbles(blocks[:, 48:176], 32).reshape(n, 8, 32)
    # qh[i] bit s -> sub-block s, lane i: bits() yields [n, 32 bytes, 8 bits], want [n, 8, 32]
    qh = bits(blocks[:, 16:48]).reshape(n, 32, 8).transpose(1, 2)
    q = (ql | (qh << 4)).float()
    return (scale * q - neg_min).reshape(n, QK_K)


def dequantize_q6_k(blocks: torch.Tensor) -> torch.Tensor:
    """[n, 210] uint8 -> [n, 256] float32."""
    n = blocks.shape[0]
    scales = blocks[:, 192:208].contiguous().view(torch.int8).float()  # [n, 16]
    d = f16(blocks[:, 208:210])
    d = (d * scales).reshape(n, QK_K // 16, 1)
    ql = nibbles(blocks[:, 0:128], 64).reshape(n, 8, 32)
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=blocks.device).reshape(1, 1, 4, 1)
    qh = ((blocks[:, 128:192].reshape(n, 2, 1, 32) >> shifts) & 0x03).reshape(n, 8, 32)
    q = (ql | (qh << 4)).to(torch.int8) - 32
    q = q.reshape(n, QK_K // 16, 16).float()
    return (d * q).reshape(n, QK_K)


def _two_bit_planes(qs: torch.Tensor) -> torch.Tensor:
    """[n, 64] uint8 -> [n, 256] 2-bit values in element order 128*h + 32*j + i."""
    n = qs.shape[0]
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=qs.device).reshape(1, 1, 4, 1)
    return ((qs.reshape(n, 2, 1, 32) >> shifts) & 3).reshape(n, QK_K)


def dequantize_q2_k(blocks: torch.Tensor) -> torch.Tensor:
    """[n, 84] uint8 -> [n, 256] float32."""
    n = blocks.shape[0]
    sc = blocks[:, 0:16]
    d = f16(blocks[:, 80:82])
    dmin = f16(blocks[:, 82:84])
    dl = (d * (sc & 0x0F).float()).reshape(n, 16, 1)
    ml = (dmin * (sc >> 4).float()).reshape(n, 16, 1)
    q = _two_bit_planes(blocks[:, 16:80]).reshape(n, 16, 16).float()
    return (dl * q - ml).reshape(n, QK_K)


def q3_k_scales(scales: torch.Tensor) -> torch.Tensor:
    """The 12-byte table of Q3_K: [n, 12] uint8 -> [n, 16] six-bit values (0..63)."""
    lo = torch.cat((scales[:, 0:8] & 0x0F, scales[:, 0:8] >> 4), dim=1)  # [n, 16]
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=scales.device).reshape(1, 4, 1)
    hi = ((scales[:, 8:12].reshape(-1, 1, 4) >> shifts) & 3).reshape(-1, 16)  # value g: byte 8 + g % 4, bits 2 (g // 4)
    return lo | (hi << 4)


def dequantize_q3_k(blocks: torch.Tensor) -> torch.Tensor:
    """[n, 110] uint8 -> [n, 256] float32."""
    n = blocks.shape[0]
    d = f16(blocks[:, 108:110])
    dl = (d * (q3_k_scales(blocks[:, 96:108]).to(torch.int8) - 32).float()).reshape(n, 16, 1)
    q = _two_bit_planes(blocks[:, 32:96]).to(torch.int8)  # [n, 256]
    hm = bits(blocks[:, 0:32]).reshape(n, 32, 8).transpose(1, 2).reshape(n, QK_K)  # bit (4h + j) of hmask[i]
    q = (q - 4 * (1 - hm.to(torch.int8))).reshape(n, 16, 16).float()
    return (dl * q).reshape(n, QK_K)
