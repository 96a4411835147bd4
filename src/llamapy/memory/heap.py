"""The process heap, tuned for the engine's per-ubatch buffers (glibc; a no-op elsewhere).

Every ubatch allocates its intermediates afresh through PyTorch (activations, a layer's
dequantized bf16 weights, the products), several MiB each for a 512-token prompt.  glibc serves
an allocation above its mmap threshold (128 KiB at first, raised as mapped blocks are freed, up
to 32 MiB) with a fresh mapping, page-faulted in and unmapped again on free, and returns the heap's
free top to the system past its trim threshold.  Which of the two a process settles into depends
on the order of its first allocations: on a 2-core Intel Xeon (KVM, family 6 model 167) about
half the processes ran SmolLM2's pp512 at 1780-1930 t/s, every buffer faulted in again at each
use, the others at 3060-3210 (`benchmarks/py_side.py`; the bf16 GEMMs, the weights' dequantization
and the copies around them twice as slow; the attention kernel, which allocates nothing, the
same), and the kernels' timing of the bf16 GEMM (kernels/calibrate.py) saw the same two speeds.
A fixed mmap threshold of 32 MiB and a trim threshold of 256 MiB keep a step's buffers in the
heap from one ubatch to the next, as llama.cpp keeps its reserved compute buffer: 5 processes of
5 ran at 3000-3260 (Gemma 3: 4 of 4 at 1855-1922, against 1194-1559 in 3 under glibc's own;
native level, avx512+vnni+bf16).  (The server's 1 MiB threshold of before ran a Gemma 3 prefill
of 8 prompts 1.6x slower and a decode step of 8 slots 1.15x slower, AMD EPYC Zen 4, 2 threads:
benchmarks/server_heap.py.)
Larger blocks (a perplexity run's logits, the KV cache) are still mapped; the one per-layer
product past the threshold (a dense FFN's gate|up, from Llama 3.2 1B at -ub 512) goes into the
context's kept buffer instead (model/work.py: 448 MiB of page faults per 512-token prompt of
Llama 3.1 8B's first 8 layers before it)."""
from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc's mallopt parameters
MMAP_THRESHOLD = 32 << 20  # glibc's largest dynamic threshold: a step's buffers come from the heap
TRIM_THRESHOLD = 256 << 20  # above a step's working set: the heap keeps it between ubatches


def tune_heap(arenas: int | None = None, mmap_threshold: int = MMAP_THRESHOLD,
              trim_threshold: int | None = TRIM_THRESHOLD) -> bool:
    """Set glibc's thresholds for this process (idempotent; auto_tune_heap calls it when the
    CPU kernels load and when a Context is made, a server with arenas=2).  arenas caps glibc's
    arenas (M_ARENA_MAX: a server's HTTP threads would each get one, keeping what they freed);
    trim_threshold None leaves glibc's.  Returns False where the C library is not glibc
    (nothing is changed)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    if arenas is not None:
        mallopt(M_ARENA_MAX, arenas)
    mallopt(M_MMAP_THRESHOLD, mmap_threshold)
    if trim_threshold is not None:
        mallopt(M_TRIM_THRESHOLD, trim_threshold)
    return True


def auto_tune_heap() -> bool:
    """tune_heap() as the engine calls it by itself (the kernels' load, a new Context), unless
    LLAMAPY_HEAP=glibc keeps glibc's own thresholds (or a caller's own tune_heap settings)."""
    return False if os.environ.get("LLAMAPY_HEAP") == "glibc" else tune_heap()
