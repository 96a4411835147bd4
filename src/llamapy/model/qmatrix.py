"""QMatrix: a weight matrix [n_out, n_in] kept quantized in memory and multiplied by a real
kernel, so the resident weights stay about the size of the GGUF file.

Kernels, by the GGUF type of the matrix:
  Q4_0 / Q4_1 / Q4_K  4-bit affine groups of 32 -> PyTorch's int4 weight-only matmul
                      (`_weight_int4pack_mm_for_cpu`) for few rows; for big ubatches the matrix
                      is dequantized into a float32 buffer and multiplied densely (faster
                      there).  The kernel is fast only in bf16 (7 mantissa bits; its f16 path
                      is ~30x slower), so activations and the (scale, zero) table are each
                      split into bf16 hi + lo parts: x·W ≈ x_hi·W_hi + x_lo·W_hi + x_hi·W_lo,
                      two kernel calls, ~16-bit precision (the tables are kept as hi/lo, 8
                      bytes per 32 weights).  Measured on SmolLM2, teacher-forced top-1 vs
                      the exact path: plain bf16 98.3%, hi/lo 99.7%.
  Q8_0                int8 values + per-block scales, exact (embedding rows come from them).
                      Few rows: a per-row-scaled int8 copy through `_weight_int8pack_mm` in
                      bf16 gives approximate outputs, then the REFINE_TOP largest outputs of
                      each row are recomputed exactly in fp32 from the Q8_0 rows, so the
                      argmax and the head of the distribution are exact (used for the
                      vocabulary projection).  Many rows: dequantize + float32 GEMM.
  anything else       dequantized once at load to `dense_dtype` (F32/F16/BF16, Q5_x, Q6_K...).
`exact=True` dequantizes everything to float32 (the reference mode for accuracy tests).
"""
from __future__ import annotations

from dataclasses import dataclass

import gguf
import torch
import torch.nn.functional as F

from ..gguf.quants import dequantize, unpack_q4_affine

T = gguf.GGMLQuantizationType
Q4_TYPES = (T.Q4_0, T.Q4_1, T.Q4_K)
DENSE_ROWS = 32  # from this many rows on, dequantize + dense GEMM beats the weight-only kernels
REFINE_TOP = 64  # Q8_0 few-row path: outputs per row recomputed exactly


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


def _unpack_blocked(packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """q uint8 [n, k] from torch's CPU int4 layout as observed: 64-row blocks, and for each
    column k 32 bytes whose low nibbles are rows 0..31 of the block and high nibbles rows
    32..63.  Used only when _blocked_layout_holds() confirmed it for this torch."""
    b = packed.reshape(n // 64, k, 32)
    q = torch.cat((b & 15, b >> 4), dim=2)  # [n/64, k, 64]
    return q.transpose(1, 2).reshape(n, k)


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
    packed: torch.Tensor | None = None  # int4: torch's packed layout; q8_0: int8 [n_out, n_in]
    scales: torch.Tensor | None = None  # int4: bf16 [2, n_in/32, n_out, 2] (hi, lo) of (scale, zero'); q8_0: f32 [n_in/32, n_out]
    slot_order: torch.Tensor | None = None  # int4 fallback: flat index of each nibble slot (None: blocked layout)
    row_q: torch.Tensor | None = None  # q8_0: int8 [n_out, n_in] requantized with one scale per row
    row_scale: torch.Tensor | None = None  # q8_0: bf16 [n_out]

    @property
    def nbytes(self) -> int:
        parts = (self.dense, self.packed, self.scales, self.row_q, self.row_scale)
        return sum(t.numel() * t.element_size() for t in parts if t is not None)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [n, n_in] float32 -> [n, n_out] float32."""
        if self.kind == "dense":
            return F.linear(x.to(self.dense.dtype), self.dense).float()
        if x.shape[0] >= DENSE_ROWS:
            return F.linear(x.float(), self.dequant(torch.float32))
        if self.kind == "int4":
            return self._int4_rows(x)
        return self._q8_0_rows(x)

    def _int4_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Few rows through the bf16 int4 kernel with hi/lo splitting.  x: [n, n_in] -> [n, n_out]."""
        mm = torch.ops.aten._weight_int4pack_mm_for_cpu
        sz_hi, sz_lo = self.scales[0], self.scales[1]
        x = x.float()
        x_hi = x.bfloat16()
        x_lo = (x - x_hi.float()).bfloat16()
        n = x.shape[0]
        y = mm(torch.cat((x_hi, x_lo)), self.packed, 32, sz_hi).float()  # [2n, n_out]
        return y[:n] + y[n:] + mm(x_hi, self.packed, 32, sz_lo).float()

    def get_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` of the matrix as float32 [len(ids), n_in] (ggml_get_rows: embeddings)."""
        if self.kind == "dense":
            return self.dense[ids].float()
        if self.kind == "q8_0":
            q = self.packed[ids].view(-1, self.n_in // 32, 32).float()
            return (q * self.scales[:, ids].t()[:, :, None]).reshape(-1, self.n_in)
        return self.dequant()[ids]

    def _q8_0_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Few rows times a Q8_0 matrix: approximate everywhere, exact on each row's top
        REFINE_TOP outputs.  x: [n, n_in] -> [n, n_out] float32."""
        if self.row_q is None:
            w = self.dequant(torch.float32)
            scale = (w.abs().amax(1) / 127).clamp_min(1e-30)  # [n_out]
            self.row_q = torch.round(w / scale[:, None]).to(torch.int8)
            self.row_scale = scale.bfloat16()
        x = x.float()
        y = torch.ops.aten._weight_int8pack_mm(x.bfloat16(), self.row_q, self.row_scale).float()  # [n, n_out]
        k = min(REFINE_TOP, self.n_out)
        top = y.topk(k, dim=1).indices  # [n, k]
        rows = self.get_rows(top.reshape(-1)).view(x.shape[0], k, self.n_in)  # exact f32
        y.scatter_(1, top, torch.einsum("nki,ni->nk", rows, x))
        return y

    def dequant(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The matrix as dense [n_out, n_in] `dtype` (what the kernels multiply by)."""
        if self.kind == "dense":
            return self.dense.to(dtype)
        if self.kind == "q8_0":
            w = self.packed.view(self.n_out, -1, 32).to(dtype) * self.scales.t()[:, :, None].to(dtype)
            return w.reshape(self.n_out, self.n_in)
        if self.slot_order is None:
            q = _unpack_blocked(self.packed, self.n_out, self.n_in)
        else:
            nib = torch.stack((self.packed & 15, self.packed >> 4), -1).reshape(-1)
            q = torch.empty(self.n_out * self.n_in, dtype=torch.uint8)
            q[self.slot_order] = nib
        w = q.reshape(self.n_out, -1, 32).to(dtype).sub_(8)  # [n_out, n_in/32, 32], one buffer, in place
        s = (self.scales[0].float() + self.scales[1].float()).to(dtype).permute(1, 0, 2)  # [n_out, n_in/32, 2]
        return w.mul_(s[..., :1]).add_(s[..., 1:]).reshape(self.n_out, self.n_in)


def _kind(qtype: T, n_in: int, exact: bool) -> str:
    if exact or n_in % 32:
        return "dense"
    return "int4" if qtype in Q4_TYPES else "q8_0" if qtype == T.Q8_0 else "dense"


def qmatrix_nbytes(qtype: T, shape: tuple[int, int], exact: bool, dense_dtype: torch.dtype) -> int:
    """Resident bytes of the QMatrix make_qmatrix builds for one [n_out, n_in] tensor (the
    memory estimate uses this, so predicted == allocated)."""
    n_out, n_in = shape
    kind = _kind(qtype, n_in, exact)
    if kind == "int4":  # packed nibbles + (hi, lo) bf16 [n_in/32, n_out, 2] tables
        return n_out * n_in // 2 + 2 * (n_in // 32) * n_out * 2 * 2
    if kind == "q8_0":  # int8 values + f32 block scales + per-row int8 copy + bf16 row scales
        return n_out * n_in + (n_in // 32) * n_out * 4 + n_out * n_in + n_out * 2
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

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([p(x) for p in self.parts], dim=1)

    def dequant(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.cat([p.dequant(dtype) for p in self.parts])


def make_qmatrix(parts: list[tuple[torch.Tensor, T, tuple[int, int]]], exact: bool, dense_dtype: torch.dtype,
                 slot_orders: dict[tuple[int, int], torch.Tensor]) -> QMatrix | StackedMatrix:
    """Build one matrix from GGUF tensors (raw bytes, type, [n_out, n_in]) stacked along
    n_out: one tensor, or several sharing their input (Q|K|V, gate|up) fused into one matmul
    when they have the same kind of kernel (else a StackedMatrix of the separate ones)."""
    n_in = parts[0][2][1]
    if len({_kind(qt, n_in, exact) for _, qt, _ in parts}) > 1:
        return StackedMatrix([make_qmatrix([p], exact, dense_dtype, slot_orders) for p in parts])
    n_out = sum(shape[0] for _, _, shape in parts)
    types = {qt for _, qt, _ in parts}
    qtype = parts[0][1] if len(types) == 1 else T.F32
    if _kind(parts[0][1], n_in, exact) == "dense":
        w = torch.cat([dequantize(raw, qt, shape) for raw, qt, shape in parts])
        return QMatrix(n_out, n_in, qtype, "dense", dense=w.to(torch.float32 if exact else dense_dtype))
    if types <= set(Q4_TYPES):
        qs, scales, zeros = zip(*(unpack_q4_affine(raw, qt, shape) for raw, qt, shape in parts))  # value = q*scale + zero
        q, scale, zero = torch.cat(qs), torch.cat(scales), torch.cat(zeros)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
        # torch's kernel computes (q - 8) * scale + zero', so zero' = zero + 8 * scale
        sz = torch.stack((scale.t(), (zero + 8 * scale).t()), -1)  # [n_in/32, n_out, 2] f32
        hi = sz.bfloat16()
        if "blocked" not in slot_orders:
            slot_orders["blocked"] = _blocked_layout_holds()
        order = None
        if not (slot_orders["blocked"] and n_out % 64 == 0):
            if (n_out, n_in) not in slot_orders:
                slot_orders[(n_out, n_in)] = _int4_slot_order(n_out, n_in)
            order = slot_orders[(n_out, n_in)]
        return QMatrix(n_out, n_in, qtype, "int4", packed=packed, scales=torch.stack((hi, (sz - hi.float()).bfloat16())),
                       slot_order=order)
    blocks = torch.cat([raw.view(torch.uint8).reshape(shape[0], n_in // 32, 34) for raw, _, shape in parts])
    d = blocks[:, :, :2].contiguous().view(torch.float16).reshape(n_out, n_in // 32).float()
    q = blocks[:, :, 2:].contiguous().view(torch.int8).reshape(n_out, n_in)
    m = QMatrix(n_out, n_in, qtype, "q8_0", packed=q, scales=d.t().contiguous())
    m._q8_0_rows(torch.zeros(1, n_in))  # build the per-row copy now, not in the first decode
    return m
