"""Tensor names -> torch weights, with byte accounting (llama_model_loader).

Weights are dequantized to `dtype` for now; `n_bytes_file` keeps what the GGUF holds so
the memory report can show both."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..gguf.quants import dequantize
from ..gguf.reader import GGUFFile
from ..kernels import KernelLib
from .qmatrix import QMatrix, make_qmatrix


@dataclass(slots=True)
class WeightLoader:
    f: GGUFFile
    device: torch.device
    dtype: torch.dtype = torch.float32
    exact: bool = False  # True: every matrix dequantized to float32 (reference mode)
    n_bytes_file: int = 0
    n_bytes_resident: int = 0
    loaded: set[str] = field(default_factory=set)
    slot_orders: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    kernels: KernelLib | None = None  # llamapy's CPU kernels: Q4_0/Q4_1/Q8_0 stay in their blocks

    def has(self, name: str) -> bool:
        return name in self.f.tensors

    def _raw(self, name: str, shape: tuple[int, ...] | None):
        info = self.f.tensors.get(name)
        if info is None:
            raise ValueError(f"{self.f.path.name}: missing tensor '{name}' (is this GGUF complete?)")
        if shape is not None and tuple(shape) != info.shape:
            raise ValueError(f"{self.f.path.name}: tensor '{name}' has shape {info.shape}, expected {tuple(shape)}")
        return info, torch.from_numpy(self.f.tensor_data(name).copy()).view(torch.uint8).reshape(-1)

    def matrix(self, *names: str) -> QMatrix:
        """Weight matrices ([n_out, n_in] each, same n_in) kept quantized where a kernel exists;
        several names are stacked along n_out into one matrix (one matmul for Q|K|V)."""
        parts = []
        for name in names:
            info, raw = self._raw(name, None)
            parts.append((raw, info.qtype, info.shape))
            self.n_bytes_file += info.n_bytes
            self.loaded.add(name)
        m = make_qmatrix(parts, self.exact, self.dtype, self.slot_orders, self.kernels)
        if self.device.type != "cpu":  # exact (dense) on accelerators: see Model.load
            m.dense = m.dense.to(self.device)
        self.n_bytes_resident += m.nbytes
        return m

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Tensor `name` in torch order, dequantized to float32 (norms, small vectors)."""
        info, raw = self._raw(name, shape)
        t = dequantize(raw, info.qtype, info.shape)
        t = t.to(device=self.device, dtype=self.dtype)
        self.n_bytes_file += info.n_bytes
        self.n_bytes_resident += t.numel() * t.element_size()
        self.loaded.add(name)
        return t

    def embeddings(self) -> tuple[QMatrix, torch.Tensor, QMatrix]:
        """token_embd [n_vocab, n_embd], output_norm [n_embd], and the output matrix: its own
        `output.weight`, or token_embd itself when the model ties them."""
        tok_embd = self.matrix("token_embd.weight")
        output = self.matrix("output.weight") if self.has("output.weight") else tok_embd
        return tok_embd, self.get("output_norm.weight"), output
