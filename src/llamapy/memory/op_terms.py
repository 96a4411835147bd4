"""The compute terms of single operations for memory/estimate.py: one intermediate (ComputeTerm),
a matrix product's result and temporaries by the path it takes (matmul_terms: bf16, the fp32 GEMM
or the AVX2 level's int8 rows, the kernels' integer lanes), and the attention kernels' per-thread
workspaces.  The whole forward pass's list is estimate.py's compute_terms."""
from __future__ import annotations

from dataclasses import dataclass

from ..kernels.types import DENSE_ROWS, DEQUANT_CHUNK, QMATRIX_DENSE_ROWS, lanes_slice_rows, mm_scratch_bound, q8mm_bytes_bound
from .heap import MMAP_THRESHOLD
from .host import torch_threads

F32 = 4  # activations and logits are float32


@dataclass(frozen=True, slots=True)
class ComputeTerm:
    """One intermediate of the forward pass: name, shape, float32 bytes, and the phase in which
    it is alive ("persistent" terms live through the whole ubatch).  Terms with a `call` live
    only during that one call of their phase (a matmul's temporaries, the attention kernel's
    inputs); terms come in forward order, so a call sees only the lasting terms before it."""

    name: str
    shape: tuple[int, ...]
    phase: str
    itemsize: int = F32
    call: str = ""

    @property
    def bytes(self) -> int:
        n = self.itemsize
        for x in self.shape:
            n *= x
        return n


def matmul_terms(name: str, n_t: int, n_in: int, n_out: int, phase: str, input_name: str = "",
                 blocks: bool = False, dense: str = "bf16", kept: bool = False) -> list[ComputeTerm]:
    """A matrix product on [n_t, n_in] -> float32 [n_t, n_out]: the float32 result (lasting), and during the call:
    the float32 input when it is a temporary (input_name), its bf16 copy, and from DENSE_ROWS rows on (blocks;
    QMATRIX_DENSE_ROWS for a QMatrix) the largest of: the weights dequantized to bf16 with the bf16 product, the
    product alone, and for model/qmatrix.py's QMatrix (not blocks, model/block_matrix.py, which dequantizes straight
    to bf16) the bf16 weights while their unpacked uint8 nibbles are alive. Blocks on the fp32 GEMM (no native bf16,
    or a fine type: dense "fp32"; model/block_matrix.py dense_dtype): no input copy, the weights dequantized to fp32
    in chunks of DEQUANT_CHUNK elements, each chunk's product, and the fp32 product, made while the weights are
    alive, or the AVX2 level's int8 K-quant rows (kernels/types.py q8mm_bytes_bound), whichever is more. Blocks in
    the kernels' integer lanes (dense "lanes": kernels/types.py lanes_gemm): lp_mm's prepared activations for one
    slice of lanes_slice_rows rows (kernels/c/mm.c lp_xprep_bytes: the int16 rows with their scales and sums, the
    same in lanes, a bf16 copy: at most 7 bytes a value), and each thread's scratch (mm_scratch_bound: from the
    threads' own heaps).  kept: the result is the context's kept buffer (model/work.py) where the blocks'
    products reach glibc's mmap threshold: then a persistent term."""
    w = n_out * n_in if n_t >= (DENSE_ROWS if blocks else QMATRIX_DENSE_ROWS) else 0
    out_b = n_t * n_out * 2
    if blocks and w and dense == "lanes":
        rows = -(-min(n_t, lanes_slice_rows(n_in)) // 16) * 16
        temps = 7 * rows * n_in + 1024 + torch_threads() * mm_scratch_bound(n_in)
    elif blocks and w and dense == "fp32":
        step = max(64, DEQUANT_CHUNK // n_in // 64 * 64)
        # the product (or the output it is copied into, chunk by chunk) is allocated while
        # the dequantized weights are alive
        temps = (4 * w if step >= n_out else 4 * step * n_in + 4 * n_t * step) + 4 * n_t * n_out
        temps = max(temps, q8mm_bytes_bound(n_t, n_in, torch_threads()))
    else:
        work = max(2 * w + out_b, out_b) if blocks else max(3 * w, 2 * w + out_b, out_b)
        temps = n_t * n_in * 2 + work
    terms = [ComputeTerm(input_name, (n_t, n_in), phase, F32, name)] if input_name else []
    kept = kept and blocks and F32 * n_t * n_out >= MMAP_THRESHOLD
    terms += [ComputeTerm(f"{name} temporaries", (temps,), phase, 1, name),
              ComputeTerm(f"{name} output", (n_t, n_out), "persistent" if kept else phase)]
    return terms


def flash_tile_bytes(n_t: int, n_kv: int, n_threads: int) -> int:
    """PyTorch's fused CPU attention works in tiles of q_split x kv_split scores per thread
    (its q_split: 256 rows from 768 queries, 64 from 192, else 32; kv_split: 512 or n_kv),
    with a score tile and its exponentials, each float32."""
    q_split = 256 if n_t >= 768 else 64 if n_t >= 192 else 32
    return n_threads * 2 * q_split * min(512, n_kv) * F32


def attn_tiles_ws_bytes(d_k: int, d_v: int) -> int:
    """One thread's workspace of the many-row attention kernel (kernels/c/attn_tiles.c
    ws_floats: AT_G tiles of AT_Q query vectors against a block of AT_C cells), the larger of
    the AVX-512 level's (32, 32, one tile) and the others' (16, 16, four tiles)."""
    return 4 * max(at_c * (d_k + d_v) + at_c * at_q + 2 * at_q + at_g * (at_q * (d_k + d_v) + 2 * at_q)
                   for at_q, at_c, at_g in ((32, 32, 1), (16, 16, 4)))
