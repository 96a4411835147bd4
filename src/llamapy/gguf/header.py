"""The GGUF header: metadata and tensor infos, read in one walk, no per-element objects.

gguf.GGUFReader builds numpy views for every element of every array, which costs seconds
(and hundreds of MiB) on a 262k-token vocabulary.  This walk decodes scalars and small
arrays; a large array is kept as ArrayRef(type, count, offset, nbytes), and a string array
also gets the file offset of each element (so gguf/reader.py can hand out any string, or all
of them, later).  GGUFHeader is the header alone (`llamapy mem`: the file is mapped for the
walk and closed); gguf/reader.py's GGUFFile keeps the map and adds the data.

Layout (GGUF v2/v3, little endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv;
n_kv times (string key, u32 type, value); n_tensors times (string name, u32 n_dims,
u64 ne[n_dims], u32 ggml type, u64 offset); padding to general.alignment; tensor data.
A string is u64 length + utf-8 bytes; an array is u32 element type + u64 count + elements.

A hostile file gives one GGUFError (a ValueError) that names the field, its byte offset and
the numbers, and nothing else (no struct.error, no IndexError, no hang): every count, string
length, array length and dimension is checked against the bytes left in the file before
anything is allocated, so no allocation is larger than the file.  Checked here: truncation
anywhere, wrong magic or version, absurd counts and lengths, unknown value types and ggml
types, nested arrays deeper than MAX_NESTING, duplicate keys or tensor names, tensor sizes
past 2^63, tensor data misaligned, overlapping another tensor's, or past the end of the
file.  What a model needs beyond the format (keys, shapes, vocabulary) is model/hparams.py's.
tests/test_gguf_fuzz.py fuzzes this walk (hypothesis and atheris)."""
from __future__ import annotations

import mmap
import struct
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

VT = gguf.GGUFValueType
_SCALAR = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
           VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d"}
NUMPY_DTYPE = {VT.UINT8: np.uint8, VT.INT8: np.int8, VT.UINT16: np.uint16, VT.INT16: np.int16,
               VT.UINT32: np.uint32, VT.INT32: np.int32, VT.FLOAT32: np.float32, VT.BOOL: np.bool_,
               VT.UINT64: np.uint64, VT.INT64: np.int64, VT.FLOAT64: np.float64}
KEEP_NUMERIC = 4096  # numeric arrays up to this many elements are decoded (per-layer arrays)
KEEP_STRINGS = 64  # string arrays up to this many elements are decoded (general.languages)
GGML_MAX_DIMS = 4
MAX_NESTING = 8  # arrays of arrays: deeper is refused (gguf-py writes none; llama.cpp reads none)
INT64_MAX = (1 << 63) - 1
DEFAULT_ALIGNMENT = 32  # general.alignment when absent
_U64 = struct.Struct("<Q")


class GGUFError(ValueError):
    """A malformed GGUF file: the message names the path, the field and its byte offset."""


@dataclass(frozen=True, slots=True)
class ArrayRef:
    """A large array left undecoded: element type, length, file offset of element 0 and the
    bytes its elements span.  A string array also carries `item_offsets`, the file offset of
    each element's u64 length (int64 [count])."""

    type: gguf.GGUFValueType
    count: int
    offset: int
    nbytes: int
    item_offsets: Any = field(default=None, compare=False, repr=False)

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True, slots=True)
class HeaderField:
    """One metadata key.  `data` mimics gguf.ReaderField.data: one entry per array element
    (so len(field.data) is the array length), [0] for a scalar."""

    name: str
    type: gguf.GGUFValueType
    value: Any
    offset: int = field(default=-1, compare=False)  # file offset of the key's string
    elem_type: gguf.GGUFValueType | None = field(default=None, compare=False)  # an array's elements

    @property
    def data(self) -> range:
        return range(len(self.value)) if self.type == VT.ARRAY else range(1)

    def contents(self) -> Any:
        return self.value


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    qtype: gguf.GGMLQuantizationType
    ne: tuple[int, ...]  # ggml order: ne[0] is the contiguous (row) length
    n_bytes: int
    offset: int = 0  # absolute file offset of the tensor's first byte
    info_offset: int = field(default=-1, compare=False)  # file offset of the tensor's info

    @property
    def shape(self) -> tuple[int, ...]:
        """torch order: reversed ne, e.g. a [n_out, n_in] weight matrix."""
        return tuple(reversed(self.ne))


class _Cursor:
    """A position in the mapped file; every read is bounds-checked against `end`."""

    def __init__(self, buf, path: Path) -> None:
        self.buf, self.pos, self.path, self.end = buf, 0, path, len(buf)
        self.ctx = "header: "  # what is being read, for the messages ("metadata 'k': ", ...)

    def fail(self, what: str, at: int | None = None, ctx: bool = True) -> GGUFError:
        return GGUFError(f"{self.path}: {self.ctx if ctx else ''}{what} at byte {self.pos if at is None else at} "
                         f"(file size {self.end} bytes)")

    def unpack(self, fmt: str, what: str = "value") -> Any:
        try:
            (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error:
            raise self.fail(f"truncated GGUF header: {what} ({struct.calcsize(fmt)} bytes) runs past "
                            f"the end of the file") from None
        self.pos += struct.calcsize(fmt)
        return v

    def count(self, what: str, min_item_bytes: int) -> int:
        """A u64 element count that the rest of the file can hold (each item >= min bytes)."""
        at = self.pos
        n = self.unpack("<Q", f"{what} count")
        if n * min_item_bytes > self.end - self.pos:
            raise self.fail(f"{what} count {n} is larger than the file could hold: it needs at least "
                            f"{n * min_item_bytes} bytes, but only {self.end - self.pos} remain", at)
        return n

    def string(self, what: str = "string") -> str:
        n = self.unpack("<Q", f"{what} length")
        if n > self.end - self.pos:
            raise self.fail(f"{what} of {n} bytes runs past the end of the file", self.pos - 8)
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value_type(self, what: str = "value type") -> gguf.GGUFValueType:
        at = self.pos
        t = self.unpack("<I", what)
        try:
            return VT(t)
        except ValueError:
            raise self.fail(f"unknown GGUF value type {t}", at) from None

    def value(self, t: gguf.GGUFValueType) -> Any:
        if t == VT.STRING:
            return self.string()
        if t == VT.ARRAY:
            return self.array()
        return self.unpack(_SCALAR[t], f"{t.name} value")

    def array(self, depth: int = 0) -> list | ArrayRef:
        et = self.value_type("array element type")
        if et == VT.STRING:
            n = self.count("string array", 8)
            if n <= KEEP_STRINGS:
                return [self.string() for _ in range(n)]
            return self._skip_strings(n)
        if et == VT.ARRAY:
            if depth >= MAX_NESTING:
                raise self.fail(f"arrays nested more than {MAX_NESTING} deep", self.pos - 4)
            n = self.count("nested array", 12)
            return [self.array(depth + 1) for _ in range(n)]
        fmt = _SCALAR[et]
        size = struct.calcsize(fmt)
        n = self.count(f"{et.name} array", size)
        start = self.pos
        self.pos += n * size
        if n <= KEEP_NUMERIC:
            return list(struct.unpack_from(f"<{n}{fmt[1]}", self.buf, start))
        return ArrayRef(et, n, start, n * size)

    def _skip_strings(self, n: int) -> ArrayRef:
        """Walk n strings by their length prefixes only, recording where each one starts
        (n <= the bytes left / 8: the offsets take no more memory than the file)."""
        buf, pos, end, unpack = self.buf, self.pos, self.end, _U64.unpack_from
        start = pos
        offs = array("q", [0]) * n
        i = 0
        try:
            for i in range(n):
                offs[i] = pos
                pos += 8 + unpack(buf, pos)[0]
                if pos > end:
                    break
        except struct.error:
            raise self.fail(f"string {i} of {n} in an array starting at byte {start}: truncated", pos) from None
        if pos > end:
            raise self.fail(f"string {i} of {n} ({pos - offs[i] - 8} bytes) runs past the end of the file", offs[i])
        self.pos = pos
        return ArrayRef(VT.STRING, n, start, pos - start, np.frombuffer(offs, dtype=np.int64))


class GGUFHeader:
    """Metadata + tensor infos of a GGUF file, read without touching tensor data.

    `fields`: key -> HeaderField; `tensors`: name -> TensorInfo (absolute data offsets);
    `kv_end`: the byte after the last metadata value; `data_offset`: where tensor data starts.
    A subclass with `data_may_be_short` (`llamapy info`) reads a file cut short in its tensor
    data: the tensors past the end are listed in `past_end` instead of refused."""

    data_may_be_short = False

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"model file not found: {self.path}")
        with open(self.path, "rb") as fh:
            try:
                buf = self._map(fh)
            except ValueError as e:  # empty file
                raise GGUFError(f"{self.path}: not a valid GGUF file (empty: no magic at byte 0)") from e
        try:
            self._parse(buf)
        except BaseException:
            buf.close()
            raise
        self._keep(buf)

    def _map(self, fh) -> mmap.mmap:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def _keep(self, buf: mmap.mmap) -> None:
        """The header alone needs nothing more from the file."""
        buf.close()

    def _parse(self, buf) -> None:
        if len(buf) < 4 or bytes(buf[:4]) != b"GGUF":
            raise GGUFError(f"{self.path}: not a valid GGUF file (magic {bytes(buf[:4])!r} at byte 0, expected b'GGUF')")
        cur = _Cursor(buf, self.path)
        cur.pos = 4
        self.version = cur.unpack("<I", "version")
        if self.version not in (2, 3):
            raise GGUFError(f"{self.path}: header: GGUF version {self.version} at byte 4 is not supported (2 or 3)")
        n_tensors = cur.count("tensor", 8 + 4 + 4 + 8)  # name length, n_dims, type, offset
        n_kv = cur.count("metadata key", 8 + 4 + 1)  # key length, type, smallest value
        self.fields: dict[str, HeaderField] = {}
        for i in range(n_kv):
            at = cur.pos
            cur.ctx = f"metadata key {i} of {n_kv}: "
            key = cur.string("key string")
            if key in self.fields:
                raise cur.fail(f"metadata key '{key}' appears twice (first at byte {self.fields[key].offset})", at, ctx=False)
            cur.ctx = f"metadata '{key}': "
            t = cur.value_type()
            vat = cur.pos
            v = cur.value(t)
            et = VT(struct.unpack_from("<I", buf, vat)[0]) if t == VT.ARRAY else None  # value() read it
            self.fields[key] = HeaderField(key, t, v, at, et)
        self.kv_end = cur.pos
        infos = []
        for i in range(n_tensors):
            at = cur.pos
            cur.ctx = f"tensor info {i} of {n_tensors}: "
            name = cur.string("name string")
            cur.ctx = f"tensor '{name}': "
            n_dims = cur.unpack("<I", "n_dims")
            if n_dims > GGML_MAX_DIMS:
                raise cur.fail(f"tensor '{name}' has {n_dims} dimensions (at most {GGML_MAX_DIMS})", at, ctx=False)
            ne = tuple(cur.unpack("<Q", f"ne[{d}]") for d in range(n_dims))
            t = cur.unpack("<I", "ggml type")
            try:
                qtype = gguf.GGMLQuantizationType(t)
            except ValueError:
                raise cur.fail(f"tensor '{name}' has unknown ggml type {t}", cur.pos - 4, ctx=False) from None
            infos.append((name, qtype, ne, cur.unpack("<Q", "data offset"), at))
        self.header_bytes = cur.pos
        align = self.get("general.alignment", DEFAULT_ALIGNMENT)
        if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1):
            f = self.fields["general.alignment"]
            raise GGUFError(f"{self.path}: metadata 'general.alignment' (key at byte {f.offset}) = {short_repr(align)} "
                            f"is not a power of two")
        self.alignment = align
        self.data_offset = -(-cur.pos // align) * align
        self.tensors: dict[str, TensorInfo] = {}
        self.past_end: list[GGUFError] = []  # data_may_be_short: each tensor whose data the file lacks
        end = cur.end
        for name, qtype, ne, rel, at in infos:
            where = f"{self.path}: tensor '{name}' (info at byte {at})"
            n_bytes = tensor_nbytes(qtype, ne, where)
            if rel % align:
                raise GGUFError(f"{where}: data offset {rel:,} is not a multiple of general.alignment ({align})")
            off = self.data_offset + rel
            if off + n_bytes > end:
                short = GGUFError(f"{where}: data at offset {off:,} + {n_bytes:,} bytes runs past the end of the file "
                                  f"({end:,} bytes; truncated download?)")
                if not self.data_may_be_short:
                    raise short
                self.past_end.append(short)
            if name in self.tensors:
                raise GGUFError(f"{self.path}: tensor '{name}' appears twice (second info at byte {at})")
            self.tensors[name] = TensorInfo(name, qtype, ne, n_bytes, off, at)
        _check_overlaps(self.path, self.tensors.values())

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "<bytes>") -> "GGUFHeader":
        """The header of a GGUF file held in memory (fuzzers, tests): the same walk and checks,
        no file and no map; `name` stands for the path in messages."""
        h = GGUFHeader.__new__(GGUFHeader)
        h.path = Path(name)
        h._parse(data)
        return h

    def get(self, key: str, default: Any = None) -> Any:
        """Metadata value (scalars as Python values, small arrays as lists, large arrays as
        ArrayRef); default if absent."""
        f = self.fields.get(key)
        return default if f is None else f.value

    def has(self, key: str) -> bool:
        return key in self.fields

    @property
    def arch(self) -> str:
        v = self.get("general.architecture", "llama")
        if not isinstance(v, str):
            f = self.fields["general.architecture"]
            raise GGUFError(f"{self.path}: metadata 'general.architecture' (key at byte {f.offset}) is a "
                            f"{_type_name(f)}, expected a string")
        return v

    def file_size(self) -> int:
        return self.path.stat().st_size


def tensor_nbytes(qtype: gguf.GGMLQuantizationType, ne: tuple[int, ...], where: str = "tensor") -> int:
    """Bytes of a tensor of ggml type qtype and shape ne: rows of ne[0] elements in blocks.
    GGUFError where a dimension or the element count does not fit in int64 (ggml's limit)."""
    sizes = gguf.GGML_QUANT_SIZES.get(qtype)
    if sizes is None:
        raise GGUFError(f"{where}: ggml type {qtype.name} has no known block size")
    bs, ts = sizes
    n = 1
    for d, x in enumerate(ne):
        if x > INT64_MAX:
            raise GGUFError(f"{where}: ne[{d}] = {x:,} is larger than 2^63 - 1")
        n *= x
    if n > INT64_MAX:
        raise GGUFError(f"{where}: ne {list(ne)} holds {n:,} elements, more than 2^63 - 1")
    if ne and ne[0] % bs:
        raise GGUFError(f"{where}: row length {ne[0]} is not a multiple of {qtype.name}'s block of {bs}")
    return n // bs * ts


def _check_overlaps(path: Path, infos) -> None:
    """No two tensors' data share a byte (sorted by offset: O(n log n) in the tensor count)."""
    prev = None
    for t in sorted((t for t in infos if t.n_bytes), key=lambda t: t.offset):
        if prev is not None and t.offset < prev.offset + prev.n_bytes:
            raise GGUFError(f"{path}: tensor '{t.name}' (info at byte {t.info_offset}): data at offset {t.offset:,} "
                            f"overlaps tensor '{prev.name}' (data at offset {prev.offset:,} + {prev.n_bytes:,} bytes)")
        prev = t


def _type_name(f: HeaderField) -> str:
    if f.type == VT.ARRAY:
        return f"ARRAY of {(f.value.type if isinstance(f.value, ArrayRef) else f.elem_type).name}"
    return f.type.name


def short_repr(v: Any) -> str:
    """A value for a message: at most 60 characters of its repr."""
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."
