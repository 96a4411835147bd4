"""Weights in transparent huge pages: one anonymous arena the loader reads matrices into.

A one-row product too large to stay in the caches streams its matrix from memory every token,
and on 4 KiB pages that is a TLB miss per 4 KiB: Gemma 3's 171 MiB vocabulary product walks
44,000 pages a token, and under a hypervisor (nested paging) each walk is costly.  Read into
2 MiB pages the same product ran in 9.3-9.7 ms where the file's mapped pages took 11.0-14.1
(a plain anonymous copy on 4 KiB pages 11.0-14.1), and a Gemma 3 decode step went 25.6 ->
20.2 ms (benchmarks/decode_profile.py -m gemma3-270m), on a 2-core Intel Xeon under KVM with
THP in `madvise` mode, at the native level (avx512+vnni+bf16).  Matrices that stay in the caches gained nothing measurable (SmolLM2's
28 MiB vocabulary: 1.16-1.17 against 1.18-1.20 ms; the layers of either model).

The cost is the file mapping's two properties: pages shared with other processes mapping the
same file (the page cache), and pages read only when first used.  So by default only the
matrices of HUGE_MIN_BYTES or more are read, into huge pages, and only when the kernel offers
them (/sys/kernel/mm/transparent_hugepage/enabled is `always` or `madvise`); the rest stays
mapped.  Model.load(mmap=True) (`--mmap`, llama.cpp's default) maps every matrix;
mmap=False (`--no-mmap`) reads every one (into huge pages where the kernel has them).

The arena is one private anonymous mapping of the file's data size (address space, not
memory: a page joins the process when the loader writes it), 2 MiB-aligned and advised
MADV_HUGEPAGE; matrices are placed one after another, 64-byte aligned, so the pages the
loader writes are the matrices' bytes rounded up once to 2 MiB, not per matrix."""
from __future__ import annotations

import ctypes
import mmap
from dataclasses import dataclass
from pathlib import Path

import torch

HUGE_PAGE = 2 << 20
HUGE_MIN_BYTES = 16 << 20  # the default reads matrices this large (a vocabulary; a 7B's layer matrices)
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
ALIGN = 64


def thp_available(path: Path = THP_ENABLED) -> bool:
    """Does the kernel give huge pages to a mapping advised MADV_HUGEPAGE?"""
    try:
        mode = path.read_text()
    except OSError:
        return False
    return ("[always]" in mode or "[madvise]" in mode) and hasattr(mmap, "MADV_HUGEPAGE")


def read_weights(mmap_flag: bool | None, thp: bool) -> tuple[int | None, bool]:
    """(the smallest matrix read into an arena, None: no arena; advise huge pages) for
    Model.load's mmap argument: True: map every matrix (llama.cpp's --mmap); False: read every
    one (--no-mmap), into huge pages where available; None: where huge pages are available,
    read the matrices of HUGE_MIN_BYTES or more into them, else map."""
    if mmap_flag is True:
        return None, False
    if mmap_flag is False:
        return 0, thp
    return (HUGE_MIN_BYTES, True) if thp else (None, False)


@dataclass(slots=True)
class WeightArena:
    """Front-to-back pieces of one anonymous mapping (see the module doc)."""

    buf: mmap.mmap
    base: int  # offset of the first 2 MiB boundary in buf
    capacity: int
    min_bytes: int  # the smallest matrix the loader reads into it
    huge: bool
    used: int = 0  # offset past the last piece
    n_bytes: int = 0  # the pieces' bytes

    @classmethod
    def reserve(cls, capacity: int, huge: bool, min_bytes: int = 0) -> "WeightArena":
        """An arena for up to `capacity` bytes of pieces (address space only)."""
        size = capacity + HUGE_PAGE + ALIGN
        buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        view = ctypes.c_char.from_buffer(buf)
        base = (-ctypes.addressof(view)) % HUGE_PAGE
        del view  # (an export would keep buf from ever closing)
        if huge:
            buf.madvise(mmap.MADV_HUGEPAGE, base, (size - base) // mmap.PAGESIZE * mmap.PAGESIZE)
        return cls(buf, base, capacity, min_bytes, huge)

    def wants(self, n_bytes: int) -> bool:
        return n_bytes >= self.min_bytes

    def take(self, n_bytes: int) -> torch.Tensor:
        """The next n_bytes of the arena as uint8 [n_bytes], 64-byte aligned; MemoryError when
        the arena is full (the caller sized it from the file, so that is a loader bug)."""
        start = -(-self.used // ALIGN) * ALIGN
        if start + n_bytes > self.capacity:
            raise MemoryError(f"weight arena: {n_bytes} bytes at {start} of {self.capacity}")
        self.used = start + n_bytes
        self.n_bytes += n_bytes
        lo = self.base + start
        return torch.frombuffer(memoryview(self.buf)[lo : lo + n_bytes], dtype=torch.uint8)
