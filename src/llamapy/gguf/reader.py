"""GGUFFile: a GGUF file mapped once; metadata, vocabulary arrays and tensor data as views.

The header is walked by gguf/header.py (no per-element objects); what a caller asks for
later is read from the same map:
  - numeric arrays (token scores, token types) as numpy views over the map: `array(key)`;
  - string arrays (tokens, merges) as GGUFStrings: one string, or all of them decoded in
    one pass, from the offsets the walk recorded: `strings(key)`;
  - tensor data as torch uint8 tensors over the map (`tensor_data`), no copy: the map is
    private (mmap.ACCESS_COPY), so the tensors are writable without a warning and a write
    would copy that page instead of touching the file; the map lives as long as any tensor
    made from it (torch.frombuffer keeps it);
  - several tensors read straight into one buffer of the caller's (`read_into`, os.preadv):
    a stacked matrix costs its bytes once, and no mapped page of the parts is touched.
torch is imported only by tensor_data, so the tokenizer and `llamapy mem` run without it."""
from __future__ import annotations

import hashlib
import mmap
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .header import NUMPY_DTYPE, VT, ArrayRef, GGUFError, GGUFHeader, HeaderField, TensorInfo

if TYPE_CHECKING:
    import torch

__all__ = ["GGUFError", "GGUFFile", "GGUFStrings", "HeaderField", "TensorInfo"]


class GGUFStrings:
    """A GGUF string array over the map: len(), s[i] (str), s.raw(i) (bytes), s.tolist().
    `starts` / `lengths` (int64) locate each string's bytes in `buf`."""

    def __init__(self, buf, starts: np.ndarray, lengths: np.ndarray) -> None:
        self.buf = buf  # the mapped file (or the bytes of a small decoded array)
        self.starts, self.lengths = starts, lengths

    @classmethod
    def from_ref(cls, buf, ref: ArrayRef) -> "GGUFStrings":
        offs = ref.item_offsets
        lengths = np.diff(offs, append=ref.offset + ref.nbytes) - 8
        return cls(buf, offs + 8, lengths)

    @classmethod
    def from_list(cls, values: list[str]) -> "GGUFStrings":
        """A small decoded array (the header keeps up to KEEP_STRINGS) in the same shape."""
        raw = [v.encode("utf-8") for v in values]
        lengths = np.array([len(r) for r in raw], dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64) if raw else lengths
        return cls(b"".join(raw), starts, lengths)

    def __len__(self) -> int:
        return len(self.starts)

    def raw(self, i: int) -> bytes:
        s = int(self.starts[i])
        return bytes(self.buf[s : s + int(self.lengths[i])])

    def __getitem__(self, i: int) -> str:
        return self.raw(i).decode("utf-8", errors="replace")

    def tolist(self) -> list[str]:
        """Every string, decoded in one pass over the map (invalid UTF-8 -> U+FFFD)."""
        mv = memoryview(self.buf)
        try:
            return [str(mv[s : s + n], "utf-8", "replace") for s, n in zip(self.starts.tolist(), self.lengths.tolist())]
        finally:
            mv.release()


def _map_private(fh) -> mmap.mmap:
    """A private (copy-on-write) map of the whole file; read-only where the system refuses a
    private writable map of this size (strict overcommit: it would count the file as memory)."""
    try:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    except OSError:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


class GGUFFile(GGUFHeader):
    def _map(self, fh) -> mmap.mmap:
        return _map_private(fh)

    def _keep(self, buf: mmap.mmap) -> None:
        self._buf = buf
        self._fd = os.open(self.path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)

    # --- metadata ----------------------------------------------------------------------
    def array(self, key: str) -> np.ndarray | None:
        """A numeric array as numpy: a read-only view over the map for a large one (scores,
        token types), a small new array otherwise; None if absent."""
        fld = self.fields.get(key)
        if fld is None:
            return None
        v, et = fld.value, (fld.value.type if isinstance(fld.value, ArrayRef) else fld.elem_type)
        if fld.type != VT.ARRAY or et not in NUMPY_DTYPE:
            what = fld.type.name if fld.type != VT.ARRAY else f"array of {et.name}"
            raise GGUFError(f"{self.path}: metadata '{key}' (key at byte {fld.offset}) is a {what}, not an array of numbers")
        if isinstance(v, ArrayRef):
            a = np.frombuffer(self._buf, dtype=NUMPY_DTYPE[v.type], count=v.count, offset=v.offset)
            a.flags.writeable = False
            return a
        return np.asarray(v, dtype=NUMPY_DTYPE[et])

    def strings(self, key: str) -> GGUFStrings | None:
        """A string array (tokens, merges) as GGUFStrings; None if absent."""
        fld = self.fields.get(key)
        if fld is None:
            return None
        v = fld.value
        if isinstance(v, ArrayRef) and v.type == VT.STRING:
            return GGUFStrings.from_ref(self._buf, v)
        if fld.type == VT.ARRAY and fld.elem_type == VT.STRING:
            return GGUFStrings.from_list(v)
        raise GGUFError(f"{self.path}: metadata '{key}' (key at byte {fld.offset}) is not a string array")

    def metadata_sha256(self) -> str:
        """sha256 of the bytes from the magic to the last metadata value: everything the
        vocabulary depends on, and nothing of the tensors."""
        return hashlib.sha256(memoryview(self._buf)[: self.kv_end]).hexdigest()

    # --- tensor data -------------------------------------------------------------------
    def _info(self, name: str) -> TensorInfo:
        info = self.tensors.get(name)
        if info is None:
            raise GGUFError(f"{self.path.name}: missing tensor '{name}' (is this GGUF complete?)")
        return info

    def tensor_data(self, name: str) -> "torch.Tensor":
        """The tensor's bytes as a flat torch uint8 tensor over the map (no copy)."""
        import torch

        info = self._info(name)
        if info.n_bytes == 0:
            return torch.empty(0, dtype=torch.uint8)
        return torch.frombuffer(self._buf, dtype=torch.uint8, count=info.n_bytes, offset=info.offset)

    def tensor_array(self, name: str) -> np.ndarray:
        """The tensor's bytes as a flat numpy uint8 view over the map (no copy, no torch)."""
        info = self._info(name)
        return np.frombuffer(self._buf, dtype=np.uint8, count=info.n_bytes, offset=info.offset)

    def read_into(self, name: str, out: memoryview) -> None:
        """Read tensor `name` from the file into `out` (exactly its n_bytes), through the
        page cache and not the map: no mapped page is touched."""
        info = self._info(name)
        out = out.cast("B")
        if len(out) != info.n_bytes:
            raise ValueError(f"{self.path.name}: tensor '{name}' has {info.n_bytes} bytes, buffer has {len(out)}")
        done = 0
        while done < info.n_bytes:
            n = os.preadv(self._fd, [out[done:]], info.offset + done)
            if n <= 0:
                raise GGUFError(f"{self.path}: tensor '{name}': read {done} of {info.n_bytes} bytes at byte "
                                f"{info.offset + done} (file shrank while loading?)")
            done += n

    def cached_pages(self, samples: int = 64) -> tuple[int, int] | None:
        """(pages in the page cache, pages probed) over `samples` pages spread through the
        tensor data: a read with RWF_NOWAIT fails with EAGAIN where the page is not cached.
        None where the system cannot tell (no RWF_NOWAIT, or a filesystem without it)."""
        flag = getattr(os, "RWF_NOWAIT", None)
        span = len(self._buf) - self.data_offset
        if flag is None or span <= 0:
            return None
        page = bytearray(1)
        hits = 0
        for k in range(samples):
            try:
                hits += os.preadv(self._fd, [page], self.data_offset + span * k // samples, flag) > 0
            except BlockingIOError:
                pass
            except OSError:
                return None
        return hits, samples

    def read_ahead(self, progress=None, chunk: int = 8 << 20) -> int:
        """Read the tensor data once through the page cache (into a scratch buffer, not the
        map: the process does not grow), calling progress(fraction) as it goes; returns the
        bytes read.  For a cold page cache, so the first forward pass does not wait on the
        disk one page fault at a time."""
        span = len(self._buf) - self.data_offset
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self._fd, self.data_offset, span, os.POSIX_FADV_SEQUENTIAL)
        scratch = bytearray(min(chunk, max(span, 1)))
        done = 0
        while done < span:
            n = os.preadv(self._fd, [scratch], self.data_offset + done)
            if n <= 0:
                break
            done += n
            if progress is not None:
                progress(done / span)
        return done

    def advise_willneed(self) -> None:
        """Ask the kernel to start reading the tensor data into the page cache (asynchronous;
        mapped pages join the process only when a kernel first reads them)."""
        start = self.data_offset // mmap.PAGESIZE * mmap.PAGESIZE
        if len(self._buf) > start:
            try:
                self._buf.madvise(mmap.MADV_WILLNEED, start, len(self._buf) - start)
            except (AttributeError, OSError, ValueError):  # not on this platform: only a hint
                pass
