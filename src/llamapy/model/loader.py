"""Tensor names -> torch weights, with byte accounting (llama_model_loader).

Weights are dequantized to `dtype` for now; `n_bytes_file` keeps what the GGUF holds so
the memory report can show both."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..gguf.quants import dequantize
from ..gguf.reader import GGUFFile


@dataclass(slots=True)
class WeightLoader:
    f: GGUFFile
    device: torch.device
    dtype: torch.dtype = torch.float32
    n_bytes_file: int = 0
    n_bytes_resident: int = 0
    loaded: set[str] = field(default_factory=set)

    def has(self, name: str) -> bool:
        return name in self.f.tensors

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Tensor `name` in torch order ([n_out, n_in] for matrices), dequantized."""
        info = self.f.tensors.get(name)
        if info is None:
            raise ValueError(f"{self.f.path.name}: missing tensor '{name}' (is this GGUF complete?)")
        if shape is not None and tuple(shape) != info.shape:
            raise ValueError(f"{self.f.path.name}: tensor '{name}' has shape {info.shape}, expected {tuple(shape)}")
        raw = torch.from_numpy(self.f.tensor_data(name).copy())
        t = dequantize(raw.view(torch.uint8).reshape(-1), info.qtype, info.shape)
        t = t.to(device=self.device, dtype=self.dtype)
        self.n_bytes_file += info.n_bytes
        self.n_bytes_resident += t.numel() * t.element_size()
        self.loaded.add(name)
        return t
