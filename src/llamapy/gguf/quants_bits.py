"""Byte-level helpers shared by the GGML block codecs (quants.py, quants_k.py, quants_pack.py).

Everything here is layout arithmetic: block sizes from gguf's own table, viewing a
tensor's raw bytes as `[n_blocks, type_size]`, fp16 fields, nibble and bit planes.
No codec logic lives here.
"""

from __future__ import annotations

import math

import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType


def qtype_of(qtype: GGMLQuantizationType | int) -> GGMLQuantizationType:
    """Accept the enum or its integer id (as stored in a GGUF tensor info)."""
    try:
        return GGMLQuantizationType(qtype)
    except ValueError:
        raise ValueError(f"unknown ggml type id {qtype!r}") from None


def type_size(qtype: GGMLQuantizationType | int) -> tuple[int, int]:
    """(block_size in elements, type_size in bytes) of one block, from gguf.constants.GGML_QUANT_SIZES."""
    qt = qtype_of(qtype)
    if qt not in GGML_QUANT_SIZES:
        raise ValueError(f"ggml type {qt.name} has no entry in gguf.constants.GGML_QUANT_SIZES")
    return GGML_QUANT_SIZES[qt]


def row_size(qtype: GGMLQuantizationType | int, n: int) -> int:
    """ggml_row_size: bytes of `n` consecutive elements; `n` must be a whole number of blocks."""
    block_size, type_bytes = type_size(qtype)
    if n % block_size != 0:
        raise ValueError(
            f"row of {n} elements is not a multiple of the {qtype_of(qtype).name} block size ({block_size})"
        )
    return n // block_size * type_bytes


def as_bytes(raw: torch.Tensor) -> torch.Tensor:
    """The bytes of `raw` as a flat uint8 tensor (a view when `raw` is contiguous)."""
    flat = raw.contiguous().reshape(-1)
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def as_blocks(raw: torch.Tensor, qtype: GGMLQuantizationType, shape: tuple[int, ...]) -> torch.Tensor:
    """View the raw bytes of a tensor of element shape `shape` as blocks: [n_blocks, type_size] uint8.

    Raises ValueError when shape[-1] is not a whole number of blocks or when the byte
    count of `raw` differs from what `shape` implies.
    """
    if len(shape) == 0:
        raise ValueError("shape must have at least one dimension (the row, GGUF ne[0], last)")
    block_size, type_bytes = type_size(qtype)
    n_rows = math.prod(shape[:-1])
    expected = n_rows * row_size(qtype, shape[-1])
    flat = as_bytes(raw)
    if flat.numel() != expected:
        raise ValueError(
            f"{qtype.name} tensor of shape {tuple(shape)} needs {expected} bytes "
            f"({n_rows} rows x {shape[-1] // block_size} blocks x {type_bytes} B) but raw holds {flat.numel()}"
        )
    return flat.view(-1, type_bytes)


def view_as(raw_bytes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Reinterpret a uint8 tensor's last dim as `dtype` (copies first if strides forbid a view)."""
    try:
        return raw_bytes.view(dtype)
    except RuntimeError:
        return raw_bytes.contiguous().view(dtype)


def f16(b: torch.Tensor) -> torch.Tensor:
    """[n, 2] uint8 little-endian fp16 fields -> [n, 1] float32."""
    return view_as(b.contiguous(), torch.float16).float()


def f16_bytes(x: torch.Tensor) -> torch.Tensor:
    """[n, 1] float32 -> [n, 2] uint8: round-to-nearest-even fp16, as GGML_FP32_TO_FP16."""
    return x.to(torch.float16).view(torch.uint8)


def nibbles(qs: torch.Tensor, group: int) -> torch.Tensor:
    """Unpack 4-bit values: [n, m] uint8 -> [n, 2m] uint8 in ggml element order.

    Each run of `group` bytes yields `group` low nibbles followed by `group` high
    nibbles (legacy 32-blocks: group=16; Q4_K/Q5_K: group=32; Q6_K's ql: group=64).
    """
    n = qs.shape[0]
    q = qs.reshape(n, -1, 1, group)
    q = torch.cat((q & 0x0F, q >> 4), dim=2)  # [n, m // group, 2, group]
    return q.reshape(n, -1)


def pack_nibbles(q: torch.Tensor, group: int) -> torch.Tensor:
    """Inverse of nibbles(): [n, 2m] uint8 values 0..15 -> [n, m] uint8."""
    n = q.shape[0]
    q = q.reshape(n, -1, 2, group)
    return (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(n, -1)


def bits(qh: torch.Tensor) -> torch.Tensor:
    """[n, m] uint8 -> [n, 8m] uint8 of 0/1: element 8*i + j is bit j of byte i (little-endian word)."""
    n = qh.shape[0]
    shifts = torch.arange(8, dtype=torch.uint8, device=qh.device)
    return ((qh.reshape(n, -1, 1) >> shifts) & 1).reshape(n, -1)


def pack_bits(b: torch.Tensor) -> torch.Tensor:
    """Inverse of bits(): [n, 8m] 0/1 uint8 -> [n, m] uint8."""
    n = b.shape[0]
    shifts = torch.arange(8, dtype=torch.uint8, device=b.device)
    return (b.reshape(n, -1, 8) << shifts).sum(dim=-1, dtype=torch.uint8)


def table_lookup(table: tuple[int, ...], idx: torch.Tensor) -> torch.Tensor:
    """float32 values of a non-linear 4-bit table (IQ4_NL's, MXFP4's) at the indices `idx`, same shape."""
    values = torch.tensor(table, dtype=torch.float32, device=idx.device)
    return values.index_select(0, idx.reshape(-1).int()).reshape(idx.shape)
