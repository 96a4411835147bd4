"""A fast, header-only GGUF reader: metadata and tensor infos, no tensor data, no vocabulary.

gguf.GGUFReader builds numpy views for every element of every array, which costs seconds on
a 49k-token vocabulary.  `llamapy mem` needs only the hyperparameters and the tensor infos,
so GGUFHeader walks the header once: scalars and small arrays are decoded, large arrays are
skipped (string arrays by their length prefixes) and kept as ArrayRef(type, count, offset).

Layout (GGUF v2/v3, little endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv;
n_kv times (string key, u32 type, value); n_tensors times (string name, u32 n_dims,
u64 ne[n_dims], u32 ggml type, u64 offset); padding to general.alignment; tensor data.
A string is u64 length + utf-8 bytes; an array is u32 element type + u64 count + elements.

GGUFHeader offers the part of GGUFFile's interface that hparams_from_gguf() uses
(path, arch, get, has, tensors, reader.fields[key].data)."""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from .reader import TensorInfo

VT = gguf.GGUFValueType
_SCALAR = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
           VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d"}
KEEP_NUMERIC = 4096  # numeric arrays up to this many elements are decoded (per-layer arrays)
KEEP_STRINGS = 64  # string arrays up to this many elements are decoded (general.languages)


@dataclass(frozen=True, slots=True)
class ArrayRef:
    """A large array left undecoded: its element type, length and file offset of element 0."""

    type: gguf.GGUFValueType
    count: int
    offset: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True, slots=True)
class HeaderField:
    """One metadata key.  `data` mimics gguf.ReaderField.data: one entry per array element
    (so len(field.data) is the array length), [0] for a scalar."""

    name: str
    type: gguf.GGUFValueType
    value: Any

    @property
    def data(self) -> range:
        return range(len(self.value)) if self.type == VT.ARRAY else range(1)

    def contents(self) -> Any:
        return self.value


class _Cursor:
    def __init__(self, buf, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def unpack(self, fmt: str) -> Any:
        try:
            (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error as e:
            raise ValueError(f"{self.path}: truncated GGUF header at byte {self.pos}") from e
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str:
        n = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise ValueError(f"{self.path}: string of {n} bytes at byte {self.pos} runs past the end of the file")
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, t: gguf.GGUFValueType) -> Any:
        if t == VT.STRING:
            return self.string()
        if t == VT.ARRAY:
            return self.array()
        fmt = _SCALAR.get(t)
        if fmt is None:
            raise ValueError(f"{self.path}: unknown GGUF value type {int(t)} at byte {self.pos}")
        return self.unpack(fmt)

    def array(self) -> list | ArrayRef:
        et = VT(self.unpack("<I"))
        n = self.unpack("<Q")
        start = self.pos
        if et == VT.STRING:
            if n <= KEEP_STRINGS:
                return [self.string() for _ in range(n)]
            buf, pos, unpack = self.buf, self.pos, struct.unpack_from
            for _ in range(n):  # skip: only the length prefixes are read
                pos += 8 + unpack("<Q", buf, pos)[0]
            self.pos = pos
            return ArrayRef(et, n, start)
        if et == VT.ARRAY:
            return [self.array() for _ in range(n)]
        fmt = _SCALAR[et]
        size = struct.calcsize(fmt)
        if n <= KEEP_NUMERIC:
            vals = list(struct.unpack_from(f"<{n}{fmt[1]}", self.buf, self.pos))
            self.pos += n * size
            return vals
        self.pos += n * size
        return ArrayRef(et, n, start)


class GGUFHeader:
    """Metadata + tensor infos of a GGUF file, read without touching tensor data."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"model file not found: {self.path}")
        with open(self.path, "rb") as fh:
            try:
                buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError as e:  # empty file
                raise ValueError(f"{self.path}: not a valid GGUF file (empty)") from e
        try:
            self._parse(buf)
        finally:
            buf.close()
        self.reader = self  # hparams_from_gguf() reads f.reader.fields

    def _parse(self, buf) -> None:
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError(f"{self.path}: not a valid GGUF file (magic {bytes(buf[:4])!r}, expected b'GGUF')")
        cur = _Cursor(buf, self.path)
        cur.pos = 4
        self.version = cur.unpack("<I")
        if self.version not in (2, 3):
            raise ValueError(f"{self.path}: GGUF version {self.version} is not supported (2 or 3)")
        n_tensors, n_kv = cur.unpack("<Q"), cur.unpack("<Q")
        self.fields: dict[str, HeaderField] = {}
        for _ in range(n_kv):
            key = cur.string()
            t = VT(cur.unpack("<I"))
            self.fields[key] = HeaderField(key, t, cur.value(t))
        self.tensors: dict[str, TensorInfo] = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("<I")
            ne = tuple(cur.unpack("<Q") for _ in range(n_dims))
            qtype = gguf.GGMLQuantizationType(cur.unpack("<I"))
            cur.unpack("<Q")  # data offset: not needed
            self.tensors[name] = TensorInfo(name, qtype, ne, tensor_nbytes(qtype, ne))
        self.header_bytes = cur.pos

    def get(self, key: str, default: Any = None) -> Any:
        """Metadata value (scalars as Python values, small arrays as lists, large arrays as
        ArrayRef); default if absent."""
        f = self.fields.get(key)
        return default if f is None else f.value

    def has(self, key: str) -> bool:
        return key in self.fields

    @property
    def arch(self) -> str:
        return str(self.get("general.architecture", "llama"))

    def file_size(self) -> int:
        return self.path.stat().st_size


def tensor_nbytes(qtype: gguf.GGMLQuantizationType, ne: tuple[int, ...]) -> int:
    """Bytes of a tensor of ggml type qtype and shape ne: rows of ne[0] elements in blocks."""
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    n = 1
    for x in ne:
        n *= x
    return n // bs * ts
