"""Work counted, not timed: the Python function calls a piece of code makes (sys.setprofile's
"call" events) and C function calls ("c_call"), in this thread), a measure that does not depend on the machine's speed or
load.  For the tests that hold a walk to its size (the GGUF header: per key and per tensor,
never per vocabulary entry)."""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable


def calls(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """(fn(), the Python function calls and the C function calls it made in the calling thread)."""
    n = c = 0

    def prof(frame, event: str, arg) -> None:
        nonlocal n, c
        if event == "call":
            n += 1
        elif event == "c_call":
            c += 1

    old, old_t = sys.getprofile(), threading.getprofile()
    sys.setprofile(prof)
    try:
        out = fn()
    finally:
        sys.setprofile(old)
        threading.setprofile(old_t)
    return out, n, c


def header_work(path) -> tuple[int, int, int, int]:
    """The work of GGUFHeader(path) + hparams_from_gguf: (Python calls, C calls, entries =
    metadata keys + tensors, elements of the string arrays left undecoded).  The walk's
    contract (gguf/header.py): calls per key and per tensor, and per element of a large string
    array only its length prefix's unpack (one C call); gguf.GGUFReader, an object per
    element, is the ~3.5 s this avoids on SmolLM2."""
    from llamapy.gguf.header import VT, ArrayRef, GGUFHeader
    from llamapy.model.hparams import hparams_from_gguf

    def walk() -> GGUFHeader:
        h = GGUFHeader(path)
        hparams_from_gguf(h)
        return h

    h, n_py, n_c = calls(walk)
    strings = sum(f.value.count for f in h.fields.values() if isinstance(f.value, ArrayRef) and f.value.type == VT.STRING)
    return n_py, n_c, len(h.fields) + len(h.tensors), strings
