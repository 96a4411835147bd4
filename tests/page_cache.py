"""A GGUF file whose tensor data is not in the page cache, for the page-cache probe's tests
(test_startup.py, test_gguf_header.py): a fresh copy, written through and then evicted with
posix_fadvise(DONTNEED) -- a page the kernel has written back and nobody maps is dropped.

Where os.RWF_NOWAIT exists (Linux, preadv2), GGUFFile.cached_pages must see the eviction."""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from llamapy.gguf.reader import GGUFFile

CAN_PROBE = hasattr(os, "RWF_NOWAIT") and hasattr(os, "posix_fadvise")


def evict(path: Path) -> None:
    """Write the file's dirty pages back, then drop its unmapped pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fs_type(path: Path) -> str:
    """The filesystem type of the mount holding `path` (the longest mount point that is a prefix
    of it in /proc/self/mountinfo), or "" where that file does not exist."""
    best, kind = "", ""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    target = str(Path(path).resolve())
    for line in lines:
        left, _, right = line.partition(" - ")
        mount = left.split()[4]
        if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, kind = mount, right.split()[0]
    return kind


def cold_copy(src: Path, dst: Path, tail: int = 1 << 20) -> GGUFFile:
    """dst := src + `tail` zero bytes of data pages, opened as a GGUFFile, then evicted.  The
    header walk faults the map in, and the kernel maps whole read-ahead folios (here most of
    a small file): those mappings are dropped first (MADV_DONTNEED on the private, unwritten
    map: a later access reads the file again), so no page of the file stays mapped."""
    if fs_type(dst.parent) in ("tmpfs", "ramfs"):  # memory is the file: nothing can be evicted
        pytest.skip(f"{dst.parent} is on {fs_type(dst.parent)}: its pages cannot leave the page cache")
    dst.write_bytes(Path(src).read_bytes() + bytes(tail))
    f = GGUFFile(dst)
    f._buf.madvise(mmap.MADV_DONTNEED)
    evict(dst)
    return f
