"""GGML block formats <-> torch: dequantize weights, quantize KV rows, unpack 4-bit weights for kernels.

Shapes. `shape` is always the tensor's *element* shape in torch order, i.e. GGUF's
`ne` reversed: the last dim is ne[0], the contiguous row that blocks run along.
With gguf.GGUFReader that is `tuple(reversed(t.shape.tolist()))` for a ReaderTensor
`t` (t.shape is ne order). It equals `t.data.shape` for F32/F16 tensors only; for
block types (and BF16) the reader's `t.data` is uint8 with the *byte* shape
`(*shape[:-1], row_size(t.tensor_type, shape[-1]))`.

`raw` is the tensor's bytes as any contiguous torch tensor (normally
`torch.from_numpy(t.data)`; uint8 or not, it is reinterpreted as bytes).

Every decoder repeats gguf.quants' numpy arithmetic op for op in fp32, so
`dequantize` is bit-identical to `gguf.quants.dequantize` (tests/test_quants.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType

import torch
from gguf.constants import GGMLQuantizationType as T

from . import quants_iq, quants_k, quants_pack
from .quants_bits import as_blocks, bits, f16, nibbles, qtype_of, row_size, table_lookup, type_size

__all__ = [
    "DEQUANTIZE_TYPES", "QUANTIZE_TYPES", "Q4_AFFINE_TYPES",
    "dequantize", "quantize", "unpack_q4_affine", "type_size", "row_size",
]


def _dq_q4_0(b: torch.Tensor) -> torch.Tensor:  # d f16 | qs[16]
    q = nibbles(b[:, 2:], 16).to(torch.int8) - 8
    return f16(b[:, 0:2]) * q.float()


def _dq_q4_1(b: torch.Tensor) -> torch.Tensor:  # d f16 | m f16 | qs[16]
    return f16(b[:, 0:2]) * nibbles(b[:, 4:], 16).float() + f16(b[:, 2:4])


def _q5(qh: torch.Tensor, qs: torch.Tensor) -> torch.Tensor:
    """qh [n, 4] (bit j of the u32 = fifth bit of element j), qs [n, 16] -> [n, 32] uint8 0..31."""
    return nibbles(qs, 16) | (bits(qh) << 4)


def _dq_q5_0(b: torch.Tensor) -> torch.Tensor:  # d f16 | qh[4] | qs[16]
    q = _q5(b[:, 2:6], b[:, 6:]).to(torch.int8) - 16
    return f16(b[:, 0:2]) * q.float()


def _dq_q5_1(b: torch.Tensor) -> torch.Tensor:  # d f16 | m f16 | qh[4] | qs[16]
    return f16(b[:, 0:2]) * _q5(b[:, 4:8], b[:, 8:]).float() + f16(b[:, 2:4])


def _dq_q8_0(b: torch.Tensor) -> torch.Tensor:  # d f16 | qs[32] int8
    return b[:, 2:].view(torch.int8).float() * f16(b[:, 0:2])


def _dq_iq4_nl(b: torch.Tensor) -> torch.Tensor:  # d f16 | qs[16] indices into kvalues
    return f16(b[:, 0:2]) * table_lookup(quants_pack.KVALUES_IQ4NL, nibbles(b[:, 2:], 16))  # [n, 32]


_DEQUANT_BLOCKS: Mapping[T, Callable[[torch.Tensor], torch.Tensor]] = MappingProxyType({
    T.Q4_0: _dq_q4_0, T.Q4_1: _dq_q4_1, T.Q5_0: _dq_q5_0, T.Q5_1: _dq_q5_1, T.Q8_0: _dq_q8_0,
    T.IQ4_NL: _dq_iq4_nl, T.Q2_K: quants_k.dequantize_q2_k, T.Q3_K: quants_k.dequantize_q3_k,
    T.Q4_K: quants_k.dequantize_q4_k, T.Q5_K: quants_k.dequantize_q5_k,
    T.Q6_K: quants_k.dequantize_q6_k, T.IQ4_XS: quants_iq.dequantize_iq4_xs, T.MXFP4: quants_iq.dequantize_mxfp4,
})
_FLOAT_TYPES: Mapping[T, torch.dtype] = MappingProxyType(
    {T.F32: torch.float32, T.F16: torch.float16, T.BF16: torch.bfloat16}
)
DEQUANTIZE_TYPES = frozenset(_FLOAT_TYPES) | frozenset(_DEQUANT_BLOCKS)


def dequantize(raw: torch.Tensor, qtype: T | int, shape: tuple[int, ...]) -> torch.Tensor:
    """Decode a tensor's raw bytes to float32 of element shape `shape` (torch order, see module doc).

    Works on raw's device. For F32 the result may share memory with `raw`.
    Raises ValueError on a byte count that does not match `shape`, NotImplementedError
    for types outside DEQUANTIZE_TYPES.
    """
    qt = qtype_of(qtype)
    shape = tuple(int(s) for s in shape)
    if qt not in DEQUANTIZE_TYPES:
        supported = ", ".join(sorted(t.name for t in DEQUANTIZE_TYPES))
        raise NotImplementedError(f"dequantize: ggml type {qt.name} not supported (supported: {supported})")
    blocks = as_blocks(raw, qt, shape)  # validates the byte count; [n_blocks, type_size]
    if qt in _FLOAT_TYPES:
        return blocks.reshape(-1).view(_FLOAT_TYPES[qt]).float().reshape(shape)
    return _DEQUANT_BLOCKS[qt](blocks).reshape(shape)


_QUANT_BLOCKS: Mapping[T, Callable[[torch.Tensor], torch.Tensor]] = MappingProxyType({
    T.Q4_0: quants_pack.quantize_q4_0, T.Q4_1: quants_pack.quantize_q4_1,
    T.Q5_0: quants_pack.quantize_q5_0, T.Q5_1: quants_pack.quantize_q5_1,
    T.Q8_0: quants_pack.quantize_q8_0, T.IQ4_NL: quants_pack.quantize_iq4_nl, T.MXFP4: quants_iq.quantize_mxfp4,
    T.IQ4_XS: quants_iq.quantize_iq4_xs,
})
QUANTIZE_TYPES = frozenset((T.F32, T.F16, T.BF16)) | frozenset(_QUANT_BLOCKS)


def quantize(x: torch.Tensor, qtype: T | int) -> torch.Tensor:
    """Encode float rows to GGML blocks: x [..., n] -> uint8 [..., row_size(qtype, n)].

    `x` is converted to float32 first (ggml quantizes from f32). n must be a multiple of
    the block size. Bytes equal ggml's quantize_row_*_ref (and gguf.quants.quantize).
    """
    qt = qtype_of(qtype)
    if qt not in QUANTIZE_TYPES:
        supported = ", ".join(sorted(t.name for t in QUANTIZE_TYPES))
        raise NotImplementedError(f"quantize: ggml type {qt.name} not supported (supported: {supported})")
    if x.dim() == 0:
        raise ValueError("quantize: x must have at least one dimension (the row)")
    lead, n = tuple(x.shape[:-1]), int(x.shape[-1])
    out_shape = (*lead, row_size(qt, n))  # raises when n is not a whole number of blocks
    x = x.to(torch.float32).contiguous()
    if qt == T.F32:
        return x.view(torch.uint8).reshape(out_shape)
    if qt == T.F16:
        return x.to(torch.float16).view(torch.uint8).reshape(out_shape)
    if qt == T.BF16:
        return quants_pack.quantize_bf16(x).reshape(out_shape)
    block_size, _ = type_size(qt)
    return _QUANT_BLOCKS[qt](x.reshape(-1, block_size)).reshape(out_shape)


Q4_AFFINE_TYPES = frozenset((T.Q4_0, T.Q4_1, T.Q4_K))


def unpack_q4_affine(
    raw: torch.Tensor, qtype: T | int, shape: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split a 4-bit weight into codes and per-32-element affine parameters.

    Returns (q [N, K] uint8 in 0..15 in element order, scale [N, K//32] f32, zero [N, K//32] f32)
    with N = prod(shape[:-1]), K = shape[-1], such that in fp32
        q.float() * scale.repeat_interleave(32, -1) + zero.repeat_interleave(32, -1)
    equals dequantize(raw, qtype, shape).reshape(N, K) exactly (up to the sign of zero):
        Q4_0: scale = d, zero = -8*d;  Q4_1: scale = d, zero = m;
        Q4_K: scale = d*sc[j], zero = -(dmin*m[j]) for sub-block j.
    Kernels of the `(q - 8) * scale + zero'` form (torch's int4pack mm) use zero' = zero + 8*scale.
    """
    qt = qtype_of(qtype)
    shape = tuple(int(s) for s in shape)
    if qt not in Q4_AFFINE_TYPES:
        names = ", ".join(sorted(t.name for t in Q4_AFFINE_TYPES))
        raise NotImplementedError(f"unpack_q4_affine: ggml type {qt.name} is not one of {names}")
    blocks = as_blocks(raw, qt, shape)
    n_rows, k = math.prod(shape[:-1]), shape[-1]
    if qt == T.Q4_K:
        q, scale, neg_min = quants_k.q4_k_affine(blocks)  # [nb, 8, 32], [nb, 8, 1], [nb, 8, 1]
        zero = -neg_min
    else:
        scale = f16(blocks[:, 0:2])  # [nb, 1]
        off = 2 if qt == T.Q4_0 else 4
        zero = -8 * scale if qt == T.Q4_0 else f16(blocks[:, 2:4])
        q = nibbles(blocks[:, off:], 16)
    return q.reshape(n_rows, k), scale.reshape(n_rows, k // 32), zero.reshape(n_rows, k // 32)

