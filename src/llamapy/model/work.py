"""ComputeWork: the context's kept compute buffer, for the one per-layer product too large for
the heap.

glibc maps every allocation of MMAP_THRESHOLD bytes or more afresh (32 MiB, its largest
threshold: memory/heap.py) and unmaps it on free, so each use faults its pages in again, zeroed by
the kernel.  A dense FFN's gate|up product [n_tokens, 2 n_ff] float32 is the one per-layer result
that crosses it at the default -ub 512 (Llama 3.2 1B: 32 MiB, Llama 3.1 8B: 56 MiB): a new
mapping for every layer of every ubatch, ~11% of a 512-token prompt's CPU time on a Zen 5 (the
kernel's page zeroing: 448 MiB of faults per prompt of the 8B's first 8 layers).  llama.cpp keeps
its compute buffer for the context's lifetime; this keeps that one product's bytes the same way:
grown to the largest ubatch's need, then reused by every layer of every ubatch.  Products below
the threshold stay PyTorch's own (the tuned heap reuses them).  memory/estimate.py counts the
kept product as persistent (memory/op_terms.py matmul_terms, kept=True).  The fused C layers
(kernels/fused_layers.py, every --deterministic prompt) take their working region from it too
(take_bytes: layers.c lp_layers_work_bytes, one region a ubatch, its malloc'd buffers before: a
fresh mapping each ubatch past the threshold); `mem` does not model that path.  One per Context:
a context decodes one ubatch at a time."""
from __future__ import annotations

import torch

from ..memory.heap import MMAP_THRESHOLD


class ComputeWork:
    """One float32 buffer, grown to the largest request and kept; views of it for the products
    of at least min_bytes (smaller ones: None, the caller allocates as before)."""

    __slots__ = ("min_bytes", "_buf")

    def __init__(self, min_bytes: int = MMAP_THRESHOLD) -> None:
        self.min_bytes = min_bytes
        self._buf: torch.Tensor | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held now (0 before the first kept product)."""
        return 0 if self._buf is None else self._buf.numel() * 4

    def take(self, n: int, width: int) -> torch.Tensor | None:
        """A contiguous float32 [n, width] view of the kept buffer when n * width * 4 >= min_bytes,
        else None.  Its contents are undefined; it is overwritten by the next take."""
        need = n * width
        if need * 4 < self.min_bytes or need == 0:
            return None
        if self._buf is None or self._buf.numel() < need:
            self._buf = None  # the old bytes go back before the larger buffer is mapped
            self._buf = torch.empty(need, dtype=torch.float32)
        return self._buf[:need].view(n, width)

    def take_bytes(self, nbytes: int) -> torch.Tensor | None:
        """take() for a byte count: a float32 [ceil(nbytes / 4)] view (64-byte aligned: PyTorch's CPU
        allocator) when nbytes >= min_bytes, else None."""
        view = self.take(1, -(-nbytes // 4))
        return None if view is None else view.view(-1)
