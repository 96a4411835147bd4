"""KV cache element types (-ctk / -ctv): f32, f16, bf16 as torch dtypes, the rest as ggml blocks.

A row of n elements of a block type is stored as n/block_size blocks of type_size bytes,
the same bytes per block as llama.cpp, so sizes match its `llama_kv_cache: size = ...` line."""
from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING

import gguf

from ..params import KV_TYPES

if TYPE_CHECKING:
    import torch

_FLOAT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}  # the float types, by element size (torch is loaded only to store)


@dataclass(frozen=True, slots=True)
class KVType:
    name: str

    def __post_init__(self) -> None:
        if self.name not in KV_TYPES:
            raise ValueError(f"unsupported KV cache type '{self.name}' (-ctk/-ctv): choose one of {', '.join(KV_TYPES)}")

    @property
    def qtype(self) -> gguf.GGMLQuantizationType:
        return gguf.GGMLQuantizationType[self.name.upper()]

    @property
    def is_block(self) -> bool:
        return self.name not in _FLOAT_BYTES

    @property
    def torch_dtype(self) -> "torch.dtype":
        """Storage dtype: the float type itself, or uint8 for block types."""
        import torch

        return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}.get(self.name, torch.uint8)

    def row_width(self, n: int) -> int:
        """Storage elements for a row of n values (bytes for block types)."""
        if not self.is_block:
            return n
        bs, ts = gguf.GGML_QUANT_SIZES[self.qtype]
        if n % bs:
            raise ValueError(f"KV type {self.name} needs rows that are a multiple of {bs}; this model's are {n} wide")
        return n // bs * ts

    def row_bytes(self, n: int) -> int:
        return self.row_width(n) * _FLOAT_BYTES.get(self.name, 1)

    def encode(self, x: "torch.Tensor") -> "torch.Tensor":
        """x: [..., n] float32 -> storage [..., row_width(n)]."""
        if not self.is_block:
            return x.to(self.torch_dtype)
        from ..gguf.quants import quantize

        return quantize(x.float(), self.qtype)

    def decode(self, raw: "torch.Tensor", n: int) -> "torch.Tensor":
        """storage [..., row_width(n)] -> float32 [..., n]."""
        if not self.is_block:
            return raw.float()
        from ..gguf.quants import dequantize

        lead = tuple(raw.shape[:-1])
        return dequantize(raw.reshape(-1, raw.shape[-1]), self.qtype, (max(1, raw.numel() // raw.shape[-1]), n)).reshape(*lead, n)
