"""BlockMatrix: a weight matrix [n_out, n_in] kept in the GGUF file's own blocks and
multiplied by llamapy's CPU kernels (kernels/c/): resident bytes are the file's bytes, for
every type the kernels read (BLOCK_TYPES: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, and the float types F16, BF16, F32).

  one row                  lp_mm: integer products on int16 activations, one scale per block
                           of 32 (an error of at most 1/65278 of the block's largest value),
                           against the weights' own integers (single-sequence decode: the
                           weights stream from memory, the fewest instructions per block win);
                           float types in exact fp32.
  2 .. 8 rows              lp_mm: the one-row integer products (a verification, a few
                           sequences, a server step of 8 slots): 2-4 rows each block decoded
                           once for the rows; 5-8 on x86 in vector lanes (AVX-512: twin lanes,
                           two weight rows a zmm; AVX2: one group of 8), elsewhere row by row.
                           F16 / BF16 weights: exact fp32, one or two weight rows a pass.
  9 .. 15 rows             lp_mm: each weight row dequantized once, exact fp32 products with
                           every activation row (from 5 rows on a CPU with AVX512-BF16, its
                           coarse types in bf16: kernels/types.py BF16_GEMM_TYPES).
  16 .. DENSE_ROWS - 1     lp_mm: the one-row arithmetic again (int16 activations), on x86
                           with the rows in vector lanes: each weight row decoded to int16
                           once, 16 or 8 rows per vpdpwssd / vpmaddwd (kernels/c/lanes_x86.c);
                           1.2-1.6x the fp32 tiles from 16 rows on a Zen 4 at both x86
                           levels (benchmarks/kernel_ab.py --rows 16 --stream).
  64 rows or more          the K-quants (Q4_K, Q5_K, Q6_K) on int8 activations (kernels/c/q8mm_x86.h:
                           AVX512-VNNI's vpdpbusd, AVX2's vpmaddubsw; Q4_0 .. Q8_0 likewise,
                           q8mm32_x86.h, residuals by block column), in slices of
                           q8mm_slice_rows: with the outlier blocks' residuals where the rows
                           have few, int8 alone where they have many (a SwiGLU's output).
  many rows                at the AVX-512 level the lane products again, in slices of at most
                           512 rows (kernels/types.py lanes_gemm: 1.24-1.41x the fp32 GEMM
                           for Gemma 3's fine types on a Zen 4; where the CPU has AMX-INT8,
                           the types of a scale per 32 on its tiles, the same sums bit for bit:
                           kernels/c/amx_x86.c); otherwise
                           the weights dequantized (by the kernel) in chunks of DEQUANT_CHUNK
                           elements, then a dense GEMM: in bf16 where the CPU multiplies bf16
                           natively (AVX512-BF16) and the type is a coarse one (Q4_0, Q4_1,
                           Q2_K, Q3_K; BF16 weights are bf16 already), else in fp32 (a bf16
                           GEMM without hardware support runs at a sixth of fp32's speed, and
                           bf16's 8-bit mantissa would squander the K-quants' and the 5-, 6-
                           and 8-bit types' precision: Gemma 3's logits move 20x more with its
                           Q4_K in bf16; Q8_0 vocabulary projections stay exact).
Used when the kernels are available (see kernels/build.py); otherwise model/qmatrix.py's
QMatrix keeps the same weights for PyTorch's kernels."""
from __future__ import annotations

from dataclasses import dataclass

import gguf
import torch
import torch.nn.functional as F

from ..kernels import KernelLib
from ..kernels.types import (BLOCK_TYPES, DENSE_ROWS, DEQUANT_CHUNK, Q8MM_ROWS, amxk_slice_rows, bf16_gemm, block_nbytes,
                             blocks_fit, lanes_gemm, lanes_slice_rows, q8mm_slice_rows)

T = gguf.GGMLQuantizationType
__all__ = ["BLOCK_TYPES", "DENSE_ROWS", "BlockMatrix", "block_matrix", "block_nbytes", "blocks_fit", "dense_dtype"]


def dense_dtype(qtype: T, lib: KernelLib) -> torch.dtype:
    """The GEMM type of the many-row path: bf16 only where the CPU multiplies bf16 natively."""
    return torch.bfloat16 if bf16_gemm(qtype, lib.bf16, lib.coarse_many_bf16) else torch.float32


@dataclass(slots=True)
class BlockMatrix:
    n_out: int
    n_in: int
    qtype: T
    blocks: torch.Tensor  # uint8 [n_out * row bytes]: the file's rows, stacked
    lib: KernelLib
    kind: str = "blocks"
    glu_in: bool = False  # ffn_down: its input (SwiGLU rows) in Q8_K whatever its largest value (lp_mm_glu)

    @property
    def nbytes(self) -> int:
        return self.blocks.numel()

    def _dense(self, n: int) -> bool:
        """Do n rows take dequantize + GEMM (else the kernels' products)?"""
        return n >= DENSE_ROWS and not lanes_gemm(self.qtype, self.lib.level, self.lib.bf16, self.lib.coarse_many_bf16)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x: [n, n_in] float32 -> [n, n_out] float32, written into `out` when given (contiguous,
        that shape; whichever path takes the product), else a new tensor."""
        n = x.shape[0]
        x = x.contiguous() if x.dtype == torch.float32 else x.float().contiguous()
        int8 = self._int8(x)
        usable = out is not None and out.is_contiguous() and tuple(out.shape) == (n, self.n_out) and out.dtype == torch.float32
        if not int8 and self._dense(n):
            return self._dense_rows(x, out if usable else None)
        y = out if usable else torch.empty(n, self.n_out, dtype=torch.float32)
        if n:
            self._mm(x, y, False, int8)
        return y

    def add_into(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y += x W^T in place (the residual add fused into the product); y [n, n_out] float32."""
        x = x.contiguous() if x.dtype == torch.float32 else x.float().contiguous()
        int8 = self._int8(x)
        if (not int8 and self._dense(x.shape[0])) or not y.is_contiguous():
            return y.add_(self(x))
        if x.shape[0]:
            self._mm(x, y, True, int8)
        return y

    def _int8(self, x: torch.Tensor) -> int:
        """Does x [n, n_in] (float32, contiguous) take lp_mm_q8 (a K-quant or Q4_0 .. Q8_0 from Q8MM_ROWS rows, at
        the AVX512-VNNI and the AVX2 level), and how: 0 no, 1 with the outlier blocks' residuals,
        2 int8 alone (outlier-heavy activations: kernels/c/q8mm_x86.h lp_q8mm_takes)."""
        n = x.shape[0]
        return int(self.lib.fn.lp_q8mm_takes(int(self.qtype), x.data_ptr(), self.n_in, n)) if n >= Q8MM_ROWS else 0

    @property
    def det_covered(self) -> bool:
        """Has rows_det_x86.c a product of this type and width (each row the same bits at any row count)?"""
        return bool(self.lib.fn.lp_mm_det_covers(int(self.qtype), self.n_in))

    def det(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x [n, n_in] -> [n, n_out] float32 with every row bit-identical to this row's product
        alone (lp_mm_det), whatever n; raises where not det_covered."""
        n = x.shape[0]
        usable = out is not None and out.is_contiguous() and tuple(out.shape) == (n, self.n_out) and out.dtype == torch.float32
        y = out if usable else torch.empty(n, self.n_out, dtype=torch.float32)
        x = x.contiguous() if x.dtype == torch.float32 else x.float().contiguous()
        rc = self.lib.fn.lp_mm_det(int(self.qtype), self.blocks.data_ptr(), self.n_out, self.n_in, x.data_ptr(), n,
                                   y.data_ptr(), self.n_out, 0) if n else 0
        if rc == -2:
            raise ValueError(f"lp_mm_det: no deterministic multi-row product for {self.qtype.name} rows of {self.n_in}")
        if rc != 0:
            raise MemoryError(f"lp_mm_det: no scratch memory for {n} rows of {self.n_in}")
        return y

    def _mm(self, x: torch.Tensor, y: torch.Tensor, accumulate: bool, int8: int) -> None:
        """y (+)= x W^T (x float32, contiguous) through lp_mm_q8 (int8: _int8's answer) or lp_mm;
        many rows in slices of q8mm_slice_rows / lanes_slice_rows (bounded buffers)."""
        n = x.shape[0]
        if int8:
            step = q8mm_slice_rows(self.n_in)
            for r0 in range(0, n, step):
                r1 = min(n, r0 + step)
                if self.lib.fn.lp_mm_q8(int(self.qtype), self.blocks.data_ptr(), self.n_out, self.n_in, x[r0].data_ptr(),
                                        r1 - r0, y[r0].data_ptr(), y.stride(0), int(accumulate), int(int8 == 1)) != 0:
                    raise MemoryError(f"lp_mm_q8: no scratch memory for {r1 - r0} rows of {self.n_in}")
            return
        step = n
        if n >= DENSE_ROWS:
            amxk = self.lib.fn.lp_amxk_covers(int(self.qtype), self.n_in)
            step = amxk_slice_rows(self.n_in) if amxk else lanes_slice_rows(self.n_in)
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            mm = self.lib.fn.lp_mm_glu if self.glu_in else self.lib.fn.lp_mm
            rc = mm(int(self.qtype), self.blocks.data_ptr(), self.n_out, self.n_in, x[r0].data_ptr(),
                                   r1 - r0, y[r0].data_ptr(), y.stride(0), int(accumulate))
            if rc != 0:
                raise MemoryError(f"lp_mm: no scratch memory for {r1 - r0} rows of {self.n_in}")

    def _dense_rows(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x [n, n_in] float32 -> [n, n_out] float32 by dequantize + GEMM; chunk by chunk into
        `out` (contiguous, that shape) when given, a whole product copied into it."""
        dtype = dense_dtype(self.qtype, self.lib)
        xs = x.to(dtype)
        step = max(64, DEQUANT_CHUNK // self.n_in // 64 * 64)
        if self.qtype == T.F32 or step >= self.n_out:  # one product (F32: the file's own floats, no copy)
            w = self.blocks.view(torch.float32).view(self.n_out, self.n_in) if self.qtype == T.F32 else self.dequant(dtype)
            if out is None:
                return F.linear(xs, w).float()
            if dtype == torch.float32:  # F.linear's own GEMM (mm of w transposed), into out
                return torch.mm(xs, w.t(), out=out)
            return out.copy_(F.linear(xs, w))  # the bf16 product widened into out, no fp32 copy of it
        out = torch.empty(x.shape[0], self.n_out, dtype=torch.float32) if out is None else out
        for r0 in range(0, self.n_out, step):
            r1 = min(self.n_out, r0 + step)
            out[:, r0:r1] = F.linear(xs, self.dequant(dtype, r0, r1))
        return out

    def dequant(self, dtype: torch.dtype = torch.float32, r0: int = 0, r1: int | None = None) -> torch.Tensor:
        """Rows r0..r1 as dense [r1 - r0, n_in] `dtype` (ggml's dequantization, in fp32; bf16
        is its round-to-nearest-even)."""
        r1 = self.n_out if r1 is None else r1
        if dtype == torch.bfloat16:
            out = torch.empty(r1 - r0, self.n_in, dtype=torch.bfloat16)
            self.lib.fn.lp_dequant_bf16(int(self.qtype), self.blocks.data_ptr(), self.n_in, r0, r1, out.data_ptr())
            return out
        out = torch.empty(r1 - r0, self.n_in, dtype=torch.float32)
        self.lib.fn.lp_dequant(int(self.qtype), self.blocks.data_ptr(), self.n_in, r0, r1, out.data_ptr())
        return out if dtype == torch.float32 else out.to(dtype)

    def get_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` as float32 [len(ids), n_in] (ggml_get_rows: embeddings), exact."""
        ids = ids.to(torch.int64).contiguous()
        lo, hi = (int(v) for v in ids.aminmax()) if len(ids) else (0, 0)
        if lo < 0 or hi >= self.n_out:
            raise IndexError(f"row ids must be in [0, {self.n_out}), got {lo}..{hi}")
        out = torch.empty(len(ids), self.n_in, dtype=torch.float32)
        self.lib.fn.lp_get_rows(int(self.qtype), self.blocks.data_ptr(), self.n_in, ids.data_ptr(), len(ids), out.data_ptr())
        return out


def glu_input(m: object) -> object:
    """m (an ffn_down after SwiGLU) marked, where it is a BlockMatrix, to read its few input rows
    in Q8_K for the Q4_K / Q6_K products whatever their largest value, as llama.cpp rounds them
    and the fused layers do (kernels/c/layers.c prep_ff_row; GeGLU rows keep the rule there)."""
    if isinstance(m, BlockMatrix):
        m.glu_in = True
    return m


def block_matrix(parts: list[tuple[torch.Tensor, T, tuple[int, int]]], lib: KernelLib) -> BlockMatrix | None:
    """The tensors (raw bytes, type, [n_out, n_in]) stacked along n_out as one BlockMatrix,
    or None when they do not share one type the kernels read at this n_in.  One part is kept
    as it is (a view of the file stays a view); several are concatenated (the loader passes
    same-type stacks already read into one buffer, see model/loader.py)."""
    types = {qt for _, qt, _ in parts}
    n_in = parts[0][2][1]
    qtype = next(iter(types))
    if len(types) != 1 or not blocks_fit(qtype, n_in):
        return None
    raws = [raw.view(torch.uint8).reshape(-1) for raw, _, _ in parts]
    blocks = raws[0] if len(raws) == 1 else torch.cat(raws)
    n_out = sum(shape[0] for _, _, shape in parts)
    if blocks.numel() != block_nbytes(qtype, n_out, n_in):
        raise ValueError(f"{qtype.name} matrix [{n_out}, {n_in}]: {blocks.numel()} bytes, expected "
                         f"{block_nbytes(qtype, n_out, n_in)}")
    return BlockMatrix(n_out, n_in, qtype, blocks, lib)
