"""One decode row's MoE FFN in one C call (kernels/c/moe.c lp_moe_row): the router, softmax, top k,
renormalised weights and the k experts' SwiGLU products in one parallel region, x prepared once
for all of them.  For the softmax-gated, norm_w, bias-free experts of qwen3moe and Mixtral-style
llama whose matrices are all BlockMatrix with each 3-D tensor's experts contiguous; model/moe.py
falls back to its per-expert path otherwise (gpt-oss, the PyTorch QMatrix, a GPU).  A multi-row
ubatch (prefill) in one C call too (kernels/c/moe_rows.c lp_moe_rows), routed in torch (add_rows).
LLAMAPY_MOE_C=0 turns both off (A/B measurements).  The multi-row call works in bytes that a
MoeWork (one per model, shared by its layers) keeps per thread between calls: mapped and zeroed
anew for every layer of every prompt they cost a sixth of a 512-token prompt's CPU time."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import gguf
import torch

from . import KernelLib

T = gguf.GGMLQuantizationType


class MoeWork:
    """lp_moe_rows's working bytes, per thread (two contexts of one model may decode at once),
    grown to the largest ubatch's need and kept."""

    __slots__ = ("_tls",)

    def __init__(self) -> None:
        self._tls = threading.local()

    def get(self, nbytes: int) -> torch.Tensor:
        """At least nbytes bytes (uint8) for the calling thread."""
        buf = getattr(self._tls, "buf", None)
        if buf is None or buf.numel() < nbytes:
            buf = self._tls.buf = torch.empty(nbytes, dtype=torch.uint8)
        return buf


@dataclass(frozen=True, slots=True)
class MoeRow:
    lib: KernelLib
    gate_inp: torch.Tensor  # uint8: the router's F32 rows [n_expert, n_embd]
    n_expert: int
    k: int
    bases: tuple[int, int, int]  # data_ptr of expert 0's gate, up, down blocks
    types: tuple[int, int, int]
    strides: tuple[int, int, int]  # bytes from one expert's matrix to the next
    n_embd: int
    n_ff: int
    work: MoeWork | None = None  # lp_moe_rows's bytes, kept between calls (None: allocated per call)

    def add_into(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """y [1, n_embd] += the MoE FFN of x [1, n_embd] (float32, contiguous); returns the routing
        (selected experts [1, k] int64, their weights [1, k] float32)."""
        sel = torch.empty(1, self.k, dtype=torch.int64)
        w = torch.empty(1, self.k, dtype=torch.float32)
        rc = self.lib.fn.lp_moe_row(x.data_ptr(), self.gate_inp.data_ptr(), self.n_expert, self.k, *self.bases,
                                    *self.types, *self.strides, self.n_embd, self.n_ff, y.data_ptr(), sel.data_ptr(),
                                    w.data_ptr())
        if rc != 0:
            raise MemoryError(f"lp_moe_row: no scratch memory (rc {rc}) for experts of {self.n_ff} x {self.n_embd}")
        return sel, w

    def add_rows(self, x: torch.Tensor, y: torch.Tensor, counts: torch.Tensor, rows: torch.Tensor,
                 w: torch.Tensor) -> None:
        """y [n_tokens, n_embd] += the MoE FFN of x [n_tokens, n_embd] (float32, contiguous) in one
        C call (kernels/c/moe_rows.c lp_moe_rows), routed by the caller: counts [n_expert] int64
        (slots per expert), rows [n_tokens * k] int64 (each slot's row, grouped by expert), w
        [n_tokens * k] float32 (each slot's weight)."""
        need = self.lib.fn.lp_moe_rows_bytes(x.shape[0], self.n_expert, counts.data_ptr(), self.n_embd, self.n_ff)
        work = self.work.get(need) if self.work is not None and need > 0 else None
        rc = self.lib.fn.lp_moe_rows(x.data_ptr(), x.shape[0], self.n_expert, counts.data_ptr(), rows.data_ptr(),
                                     w.data_ptr(), *self.bases, *self.types, *self.strides, self.n_embd, self.n_ff,
                                     y.data_ptr(), None if work is None else work.data_ptr(),
                                     0 if work is None else work.numel())
        if rc != 0:
            raise MemoryError(f"lp_moe_rows: rc {rc} for {x.shape[0]} rows of experts of {self.n_ff} x {self.n_embd}")


def _contiguous(mats: list) -> tuple[int, int] | None:
    """(base pointer, stride) when expert e's blocks start at base + e * stride, else None."""
    base = mats[0].blocks.data_ptr()
    stride = mats[1].blocks.data_ptr() - base if len(mats) > 1 else 0
    ok = all(m.blocks.data_ptr() == base + e * stride and m.qtype == mats[0].qtype for e, m in enumerate(mats))
    return (base, stride) if ok else None


def moe_row_for(moe) -> MoeRow | None:
    """The C path for MoeFFN `moe`, or None where it does not apply (module docstring)."""
    if os.environ.get("LLAMAPY_MOE_C", "1") == "0" or moe.oai or moe.softmax_weight or not moe.norm_w:
        return None
    if any(b is not None for b in (moe.gate_inp_b, moe.gate_b, moe.up_b, moe.down_b)):
        return None
    mats = [moe.gate_inp, *moe.gate, *moe.up, *moe.down]
    if not all(getattr(m, "kind", None) == "blocks" for m in mats) or moe.gate_inp.qtype != T.F32:
        return None  # every matrix a BlockMatrix (model/block_matrix.py) in the C kernels' blocks
    if not hasattr(moe.gate_inp.lib.fn, "lp_moe_rows") or moe.gate_inp.blocks.device.type != "cpu":
        return None
    parts = [_contiguous(moe.gate), _contiguous(moe.up), _contiguous(moe.down)]
    if any(p is None for p in parts) or not 1 <= moe.n_expert_used <= 64:
        return None
    g = moe.gate[0]
    return MoeRow(moe.gate_inp.lib, moe.gate_inp.blocks, moe.n_expert, moe.n_expert_used,
                  tuple(p[0] for p in parts), (int(g.qtype), int(moe.up[0].qtype), int(moe.down[0].qtype)),
                  tuple(p[1] for p in parts), g.n_in, g.n_out, moe.work)
