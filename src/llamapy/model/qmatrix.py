"""QMatrix: a weight matrix [n_out, n_in] kept quantized in memory and multiplied by a real
kernel, so the resident weights stay about the size of the GGUF file (<= 1.1x).

Kernels, by the GGUF type of the matrix:
  Q4_0 / Q4_1 / Q4_K  4-bit affine groups of 32 -> PyTorch's int4 weight-only matmul
                      (`_weight_int4pack_mm_for_cpu`, x @ ((q - 8) * scale + zero').T) with one
                      bf16 (scale, zero') pair per group: 4.0 bits + 4 bytes per 32 weights,
                      the same 20 bytes per 32 as Q4_1 in the file.  The kernel is fast only in
                      bf16 (its f16 path is ~30x slower), so activations, the group's scale and
                      zero, and the outputs are bf16-rounded (relative 2^-9) with fp32
                      accumulation: finer than llama.cpp's own Q8_1 rounding of activations.
                      Big ubatches (>= DENSE_ROWS rows) dequantize the matrix to bf16 and run a
                      dense bf16 GEMM (~2.5x the kernel there, ~2x fp32 GEMM).
  Q8_0                int8 values with one f16 scale d per 32: q = 16 * hi + lo splits each value
                      into two nibbles, so the matrix is two int4 matrices with group scales
                      16d (hi, zero 0) and d (lo, zero' 8d), stacked into one [2 n_out, n_in]
                      kernel call whose two halves add up to d' * q (d' = bf16(d)).  The f16
                      scales are kept too: embedding rows (get_rows) are exact, and each row's
                      REFINE_TOP largest outputs are recomputed exactly in fp32, so the argmax
                      and the head of the distribution are exact (the vocabulary projection).
                      Many rows: dequantize to f32 in chunks + f32 GEMM (exact logits).
  anything else       dequantized once at load to `dense_dtype` (F32/F16/BF16, Q5_x, Q6_K...).
`exact=True` dequantizes everything to float32 (the reference mode for accuracy tests).
"""
from __future__ import annotations

from dataclasses import dataclass

import gguf
import torch
import torch.nn.functional as F

from ..gguf.quants import dequantize, unpack_q4_affine
from ..kernels import KernelLib
from .block_matrix import BlockMatrix, block_matrix, block_nbytes, blocks_fit

T = gguf.GGMLQuantizationType
Q4_TYPES = (T.Q4_0, T.Q4_1, T.Q4_K)
from ..kernels.types import QMATRIX_DENSE_ROWS as DENSE_ROWS  # from this many rows on, dequantize + dense GEMM beats PyTorch's int4 kernel
REFINE_TOP = 64  # Q8_0 few-row path: outputs per row recomputed exactly
DEQUANT_CHUNK = 1 << 21  # dense path: weights dequantized at a time (elements; 64-row multiples)


def _int4_slot_order(n: int, k: int) -> torch.Tensor:
    """For PyTorch's packed int4 layout of an [n, k] matrix: flat index (row * k + col) held by
    each nibble slot (byte b low nibble = slot 2b, high = 2b+1).  Found by packing probe
    matrices whose values are the base-16 digits of each element's flat index."""
    flat = torch.arange(n * k, dtype=torch.int64).reshape(n, k)
    order = torch.zeros(n * k, dtype=torch.int64)
    digit = 0
    while (16**digit) < n * k:
        probe = ((flat >> (4 * digit)) & 15).to(torch.int32)
        wp = torch.ops.aten._convert_weight_to_int4pack_for_cpu(probe, 1)
        nib = torch.stack((wp & 15, wp >> 4), -1).reshape(-1).to(torch.int64)
        order |= nib << (4 * digit)
        digit += 1
    return order


def _unpack_blocked(packed: torch.Tensor, n: int, k: int, r0: int = 0, r1: int | None = None) -> torch.Tensor:
    """q uint8 [r1 - r0, k] (rows r0..r1 of [n, k], multiples of 64) from torch's CPU int4 layout
    as observed: 64-row blocks, and for each column k 32 bytes whose low nibbles are rows 0..31
    of the block and high nibbles rows 32..63.  Used only when _blocked_layout_holds()."""
    r1 = n if r1 is None else r1
    b = packed.view(n // 64, k, 32)[r0 // 64 : r1 // 64]
    q = torch.cat((b & 15, b >> 4), dim=2)  # [blocks, k, 64]
    return q.transpose(1, 2).reshape(r1 - r0, k)


def _gather_blocked(packed: torch.Tensor, n: int, k: int, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` of the blocked layout as uint8 [len(ids), k] (embedding lookups)."""
    b = packed.view(n // 64, k, 32)
    byte = b[ids // 64, :, ids % 32]  # [len, k]
    return torch.where((ids % 64 >= 32)[:, None], byte >> 4, byte & 15)


def _blocked_layout_holds() -> bool:
    """Check _unpack_blocked against the probe-derived slot order on a small matrix."""
    n, k = 128, 64
    q = torch.randint(0, 16, (n, k), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    return packed.shape == (n, k // 2) and torch.equal(_unpack_blocked(packed, n, k).to(torch.int32), q)


@dataclass(slots=True)
class QMatrix:
    n_out: int
    n_in: int
    qtype: T
    kind: str  # "int4" | "q8_0" | "dense"
    dense: torch.Tensor | None = None  # [n_out, n_in] dense_dtype
    packed: torch.Tensor | None = None  # torch's int4 layout of [n_rows, n_in]; n_rows = n_out (int4), 2 n_out (q8_0: hi rows, then lo)
    scales: torch.Tensor | None = None  # bf16 [n_in/32, n_rows, 2]: (scale, zero') per group of 32
    d: torch.Tensor | None = None  # q8_0: the file's f16 block scales [n_out, n_in/32]
    slot_order: torch.Tensor | None = None  # fallback layout: flat index of each nibble slot (None: blocked)

    @property
    def nbytes(self) -> int:
        parts = (self.dense, self.packed, self.scales, self.d)
        return sum(t.numel() * t.element_size() for t in parts if t is not None)

    @property
    def n_rows(self) -> int:
        """Rows of the packed int4 matrix."""
        return 2 * self.n_out if self.kind == "q8_0" else self.n_out

    def add_into(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y += x W^T in place; y [n, n_out] float32."""
        return y.add_(self(x))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [n, n_in] float32 -> [n, n_out] float32."""
        if self.kind == "dense":
            return F.linear(x.to(self.dense.dtype), self.dense).float()
        if x.shape[0] == 0:  # a ubatch with no output rows
            return torch.zeros(0, self.n_out, dtype=torch.float32, device=x.device)
        if x.shape[0] >= DENSE_ROWS:
            return self._dense_rows(x)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x.bfloat16(), self.packed, 32, self.scales)  # [n, n_rows]
        if self.kind == "int4":
            return y.float()
        y = y[:, : self.n_out].float().add_(y[:, self.n_out :])  # hi + lo nibble halves
        return self._refine(x.float(), y)

    def _refine(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Recompute each row's REFINE_TOP largest outputs of y [n, n_out] exactly (fp32 from
        the exact rows).  x: [n, n_in]."""
        k = min(REFINE_TOP, self.n_out)
        top = y.topk(k, dim=1).indices  # [n, k]
        rows = self.get_rows(top.reshape(-1)).view(x.shape[0], k, self.n_in)  # exact f32
        return y.scatter_(1, top, torch.einsum("nki,ni->nk", rows, x))

    def _dense_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Many rows: dequantize DEQUANT_CHUNK weights at a time and run a dense GEMM: bf16 for
        int4 matrices, f32 for Q8_0 (the logits stay exact).  x: [n, n_in] -> [n, n_out]."""
        dtype = torch.float32 if self.kind == "q8_0" else torch.bfloat16
        xs = x.to(dtype)
        step = max(64, DEQUANT_CHUNK // self.n_in // 64 * 64)
        if step >= self.n_out:
            return F.linear(xs, self.dequant(dtype)).float()
        out = torch.empty(x.shape[0], self.n_out, dtype=torch.float32, device=x.device)
        for r0 in range(0, self.n_out, step):
            r1 = min(self.n_out, r0 + step)
            out[:, r0:r1] = F.linear(xs, self.dequant(dtype, r0, r1))
        return out

    def _codes(self, r0: int, r1: int) -> torch.Tensor:
        """uint8 nibbles of packed rows r0..r1 [r1 - r0, n_in]."""
        if self.slot_order is None:
            return _unpack_blocked(self.packed, self.n_rows, self.n_in, r0, r1)
        nib = torch.stack((self.packed & 15, self.packed >> 4), -1).reshape(-1)
        q = torch.empty(self.n_rows * self.n_in, dtype=torch.uint8)
        q[self.slot_order] = nib
        return q.view(self.n_rows, self.n_in)[r0:r1]

    def _q8_values(self, hi: torch.Tensor, lo: torch.Tensor, rows: torch.Tensor | slice, dtype: torch.dtype) -> torch.Tensor:
        """q8_0: d * (16 (hi - 8) + lo) for nibbles hi, lo [n, n_in] of matrix rows `rows`."""
        q = (hi.to(torch.int16) - 8).mul_(16).add_(lo).to(dtype)
        return (q.view(q.shape[0], -1, 32) * self.d[rows].to(dtype)[:, :, None]).view(q.shape[0], self.n_in)

    def get_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` of the matrix as float32 [len(ids), n_in] (ggml_get_rows: embeddings)."""
        if self.kind == "dense":
            return self.dense[ids].float()
        if self.kind == "q8_0":
            if self.slot_order is None:
                hi = _gather_blocked(self.packed, self.n_rows, self.n_in, ids)
                lo = _gather_blocked(self.packed, self.n_rows, self.n_in, ids + self.n_out)
            else:
                codes = self._codes(0, self.n_rows)
                hi, lo = codes[ids], codes[ids + self.n_out]
            return self._q8_values(hi, lo, ids, torch.float32)
        return self.dequant()[ids]

    def dequant(self, dtype: torch.dtype = torch.float32, r0: int = 0, r1: int | None = None) -> torch.Tensor:
        """Rows r0..r1 of the matrix as dense [r1 - r0, n_in] `dtype` (what the kernels multiply
        by; r0, r1 multiples of 64 unless whole)."""
        r1 = self.n_out if r1 is None else r1
        if self.kind == "dense":
            return self.dense[r0:r1].to(dtype)
        if self.kind == "q8_0":
            n = self.n_out
            if self.slot_order is None:
                hi, lo = self._codes(r0, r1), self._codes(n + r0, n + r1)
            else:
                codes = self._codes(0, self.n_rows)
                hi, lo = codes[r0:r1], codes[n + r0 : n + r1]
            return self._q8_values(hi, lo, slice(r0, r1), torch.float32).to(dtype)
        w = self._codes(r0, r1).view(r1 - r0, -1, 32).to(dtype).sub_(8)  # [rows, n_in/32, 32], in place
        s = self.scales[:, r0:r1].to(dtype).permute(1, 0, 2)  # [rows, n_in/32, 2]
        return w.mul_(s[..., :1]).add_(s[..., 1:]).view(r1 - r0, self.n_in)


def _kind(qtype: T, n_in: int, exact: bool, n_out: int = 0) -> str:
    """"int4" / "q8_0" where PyTorch's int4 kernel takes the matrix (n_in in groups of 32,
    n_out a multiple of 16, its packing rule), else "dense"."""
    if exact or n_in % 32 or n_out % 16:
        return "dense"
    return "int4" if qtype in Q4_TYPES else "q8_0" if qtype == T.Q8_0 else "dense"


def qmatrix_nbytes(qtype: T, shape: tuple[int, int], exact: bool, dense_dtype: torch.dtype, blocks: bool = False) -> int:
    """Resident bytes of the matrix make_qmatrix builds for one [n_out, n_in] tensor (the
    memory estimate uses this, so predicted == allocated).  blocks: the CPU kernels are
    available, so every type they read stays in the file's blocks (model/block_matrix.py)."""
    n_out, n_in = shape
    if blocks and not exact and blocks_fit(qtype, n_in):
        return block_nbytes(qtype, n_out, n_in)
    kind = _kind(qtype, n_in, exact, n_out)
    groups = (n_in // 32) * n_out
    if kind == "int4":  # packed nibbles + bf16 (scale, zero') per group
        return n_out * n_in // 2 + groups * 4
    if kind == "q8_0":  # two nibble matrices + their bf16 tables + the f16 block scales
        return n_out * n_in + 2 * groups * 4 + groups * 2
    esize = 4 if exact else torch.empty((), dtype=dense_dtype).element_size()
    return n_out * n_in * esize


@dataclass(slots=True)
class StackedMatrix:
    """Matrices of different kinds sharing an input, stacked along n_out: one call, the parts'
    own kernels (so Q|K|V of mixed GGUF types keep each type's kernel and bytes)."""

    parts: list[QMatrix]

    @property
    def n_out(self) -> int:
        return sum(p.n_out for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The parts' products side by side [n, n_out], concatenated into `out` when given."""
        return torch.cat([p(x) for p in self.parts], dim=1, out=out)

    def add_into(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return y.add_(self(x))

    def dequant(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.cat([p.dequant(dtype) for p in self.parts])


def _pack_int4(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, slot_orders: dict, row_align: int) -> tuple:
    """q uint8 [n, k] in 0..15 with value = q * scale + zero per group of 32 ([n, k/32] each) ->
    (torch's packed layout, bf16 [k/32, n, 2] (scale, zero'), fallback slot order or None).
    The blocked layout is read directly when row_align (the row ranges read) is 64-aligned."""
    n, k = q.shape
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
    # torch's kernel computes (q - 8) * scale + zero', so zero' = zero + 8 * scale
    sz = torch.stack((scale.t(), (zero + 8 * scale).t()), -1).bfloat16()  # [k/32, n, 2]
    if "blocked" not in slot_orders:
        slot_orders["blocked"] = _blocked_layout_holds()
    order = None
    if not (slot_orders["blocked"] and n % 64 == 0 and row_align % 64 == 0):
        if (n, k) not in slot_orders:
            slot_orders[(n, k)] = _int4_slot_order(n, k)
        order = slot_orders[(n, k)]
    return packed, sz, order


def make_qmatrix(parts: list[tuple[torch.Tensor, T, tuple[int, int]]], exact: bool, dense_dtype: torch.dtype,
                 slot_orders: dict[tuple[int, int], torch.Tensor],
                 lib: KernelLib | None = None) -> QMatrix | StackedMatrix | BlockMatrix:
    """Build one matrix from GGUF tensors (raw bytes, type, [n_out, n_in]) stacked along
    n_out: one tensor, or several sharing their input (Q|K|V, gate|up) fused into one matmul
    when they have the same kind of kernel (else a StackedMatrix of the separate ones).
    lib (the CPU kernels): every type they read stays in its blocks, as a BlockMatrix (parts
    of different types: a StackedMatrix of one BlockMatrix each)."""
    n_in = parts[0][2][1]
    if lib is not None and not exact:
        bm = block_matrix(parts, lib)
        if bm is not None:
            return bm
        if len(parts) > 1 and any(blocks_fit(qt, n_in) for _, qt, _ in parts):
            return StackedMatrix([make_qmatrix([p], exact, dense_dtype, slot_orders, lib) for p in parts])
    kinds = {_kind(qt, n_in, exact, shape[0]) for _, qt, shape in parts}
    if len(kinds) > 1 or (kinds == {"q8_0"} and len(parts) > 1):
        return StackedMatrix([make_qmatrix([p], exact, dense_dtype, slot_orders) for p in parts])
    n_out = sum(shape[0] for _, _, shape in parts)
    types = {qt for _, qt, _ in parts}
    qtype = parts[0][1] if len(types) == 1 else T.F32
    if kinds == {"dense"}:
        w = torch.cat([dequantize(raw, qt, shape) for raw, qt, shape in parts])
        return QMatrix(n_out, n_in, qtype, "dense", dense=w.to(torch.float32 if exact else dense_dtype))
    if kinds == {"int4"}:
        qs, scales, zeros = zip(*(unpack_q4_affine(raw, qt, shape) for raw, qt, shape in parts))  # value = q*scale + zero
        packed, sz, order = _pack_int4(torch.cat(qs), torch.cat(scales), torch.cat(zeros), slot_orders, n_out)
        return QMatrix(n_out, n_in, qtype, "int4", packed=packed, scales=sz, slot_order=order)
    raw, _, shape = parts[0]
    blocks = raw.view(torch.uint8).reshape(n_out, n_in // 32, 34)
    d = blocks[:, :, :2].contiguous().view(torch.float16).reshape(n_out, n_in // 32)
    q = blocks[:, :, 2:].contiguous().view(torch.int8).reshape(n_out, n_in).to(torch.int16)
    hi, lo = (q >> 4) + 8, q & 15  # q = 16 (hi - 8) + lo; hi, lo in 0..15
    df = d.float()
    scale = torch.cat((16 * df, df))  # [2 n_out, n_in/32]
    zero = torch.cat((-8 * 16 * df, torch.zeros_like(df)))  # hi: (hi - 8) * 16d; lo: lo * d
    packed, sz, order = _pack_int4(torch.cat((hi, lo)).to(torch.uint8), scale, zero, slot_orders, n_out)
    return QMatrix(n_out, n_in, qtype, "q8_0", packed=packed, scales=sz, d=d, slot_order=order)
