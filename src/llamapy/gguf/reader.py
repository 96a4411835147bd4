"""GGUF file access: metadata values and tensor infos, parsed by the `gguf` package.

GGUFFile wraps gguf.GGUFReader (memory-mapped: no tensor data is read until a tensor's
`data` is touched)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    qtype: gguf.GGMLQuantizationType
    ne: tuple[int, ...]  # ggml order: ne[0] is the contiguous (row) length
    n_bytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """torch order: reversed ne, e.g. a [n_out, n_in] weight matrix."""
        return tuple(reversed(self.ne))


class GGUFFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"model file not found: {self.path}")
        try:
            self.reader = gguf.GGUFReader(str(self.path), "r")
        except Exception as e:  # the gguf package raises ValueError/struct errors on garbage
            raise ValueError(f"{self.path}: not a valid GGUF file ({e})") from e
        self.tensors: dict[str, TensorInfo] = {
            t.name: TensorInfo(t.name, t.tensor_type, tuple(int(x) for x in t.shape), int(t.n_bytes))
            for t in self.reader.tensors
        }
        self._by_name = {t.name: t for t in self.reader.tensors}

    def get(self, key: str, default: Any = None) -> Any:
        """Metadata value (scalars as Python values, arrays as lists); default if absent."""
        f = self.reader.fields.get(key)
        if f is None:
            return default
        return f.contents()

    def has(self, key: str) -> bool:
        return key in self.reader.fields

    @property
    def arch(self) -> str:
        return str(self.get("general.architecture", "llama"))

    def tensor_data(self, name: str):
        """The raw numpy view (memory-mapped) of one tensor: uint8 blocks for quantized types."""
        return self._by_name[name].data

    def file_size(self) -> int:
        return self.path.stat().st_size
