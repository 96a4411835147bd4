"""BlockMatrix: a weight matrix [n_out, n_in] kept in the GGUF file's own blocks (Q4_0, Q4_1,
Q8_0) and multiplied by llamapy's CPU kernels (kernels/cpu_kernels.c): resident bytes are
the file's bytes.

  few rows (< DENSE_ROWS)  lp_mm: one row in exact fp32 (each block expanded to floats in
                           registers); several rows bf16 products with fp32 sums where the
                           CPU has AVX512-BF16, else fp32.
  many rows                the weights dequantized (by the kernel) in chunks of
                           DEQUANT_CHUNK elements, then a dense GEMM: bf16 for the 4-bit
                           types, fp32 for Q8_0 (the vocabulary projection stays exact).
Used when the kernels are available (see kernels/build.py); otherwise model/qmatrix.py's
QMatrix keeps the same weights for PyTorch's int4 kernel."""
from __future__ import annotations

from dataclasses import dataclass

import gguf
import torch
import torch.nn.functional as F

from ..kernels import KernelLib

T = gguf.GGMLQuantizationType
BLOCK_TYPES = {T.Q4_0: 18, T.Q4_1: 20, T.Q8_0: 34}  # bytes per block of 32 weights
DENSE_ROWS = 32  # from this many rows on, dequantize + dense GEMM beats the few-row kernel
DEQUANT_CHUNK = 1 << 21  # dense path: weights dequantized at a time (elements)


@dataclass(slots=True)
class BlockMatrix:
    n_out: int
    n_in: int
    qtype: T
    blocks: torch.Tensor  # uint8 [n_out * n_in / 32 * block bytes]: the file's rows, stacked
    lib: KernelLib
    kind: str = "blocks"

    @property
    def nbytes(self) -> int:
        return self.blocks.numel()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [n, n_in] float32 -> [n, n_out] float32."""
        n = x.shape[0]
        if n >= DENSE_ROWS:
            return self._dense_rows(x)
        y = torch.empty(n, self.n_out, dtype=torch.float32)
        if n:
            self._mm(x, y, accumulate=False)
        return y

    def add_into(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y += x W^T in place (the residual add fused into the product); y [n, n_out] float32."""
        if x.shape[0] >= DENSE_ROWS or not y.is_contiguous():
            return y.add_(self(x))
        if x.shape[0]:
            self._mm(x, y, accumulate=True)
        return y

    def _mm(self, x: torch.Tensor, y: torch.Tensor, accumulate: bool) -> None:
        x = x.contiguous() if x.dtype == torch.float32 else x.float().contiguous()
        self.lib.fn.lp_mm(int(self.qtype), self.blocks.data_ptr(), self.n_out, self.n_in, x.data_ptr(), x.shape[0],
                          y.data_ptr(), y.stride(0), int(accumulate))

    def _dense_rows(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.float32 if self.qtype == T.Q8_0 else torch.bfloat16
        xs = x.to(dtype)
        step = max(64, DEQUANT_CHUNK // self.n_in // 64 * 64)
        if step >= self.n_out:
            return F.linear(xs, self.dequant(dtype)).float()
        out = torch.empty(x.shape[0], self.n_out, dtype=torch.float32)
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
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.n_out):
            raise IndexError(f"row ids must be in [0, {self.n_out}), got {int(ids.min())}..{int(ids.max())}")
        out = torch.empty(len(ids), self.n_in, dtype=torch.float32)
        self.lib.fn.lp_get_rows(int(self.qtype), self.blocks.data_ptr(), self.n_in, ids.data_ptr(), len(ids), out.data_ptr())
        return out


def block_matrix(parts: list[tuple[torch.Tensor, T, tuple[int, int]]], lib: KernelLib) -> BlockMatrix | None:
    """The tensors (raw bytes, type, [n_out, n_in]) stacked along n_out as one BlockMatrix,
    or None when they do not share one block type the kernels cover (or n_in % 32)."""
    types = {qt for _, qt, _ in parts}
    n_in = parts[0][2][1]
    if len(types) != 1 or next(iter(types)) not in BLOCK_TYPES or n_in % 32:
        return None
    qtype = next(iter(types))
    raws = [raw.view(torch.uint8).reshape(-1) for raw, _, _ in parts]
    blocks = raws[0] if len(raws) == 1 else torch.cat(raws)
    n_out = sum(shape[0] for _, _, shape in parts)
    assert blocks.numel() == n_out * n_in // 32 * BLOCK_TYPES[qtype]
    return BlockMatrix(n_out, n_in, qtype, blocks, lib)
