"""What the CPU kernels read and when each path runs, without torch (`llamapy mem` and the
memory estimate size the weights and the compute buffer from these; model/block_matrix.py and
kernels/ops.py use them to choose)."""
from __future__ import annotations

import gguf

T = gguf.GGMLQuantizationType
# every type the kernels keep in its GGUF blocks (kernels/c/quants.c)
BLOCK_TYPES = frozenset({T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
                         T.IQ4_NL, T.IQ4_XS, T.MXFP4, T.F16, T.BF16, T.F32})
FLOAT_TYPES = frozenset({T.F16, T.BF16, T.F32})  # rows of any length, fp32 products
# many-row products take a bf16 GEMM on a CPU with native bf16 for these coarse types only
# (bf16's 8-bit mantissa would squander the K-quants' and the 5-, 6-, 8-bit types' precision)
BF16_GEMM_TYPES = frozenset({T.Q4_0, T.Q4_1, T.Q2_K, T.Q3_K, T.BF16})
BLOCK32_TYPES = frozenset({T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0})  # one scale (and minimum) per block of 32
FAST_ROWS = 32  # ubatches of fewer rows take the fused decode kernels (kernels/ops.py)
MAX_KV_SETS = 8  # KV sets (caches a ubatch stores into and reads) of one lp_layers call: layers.c LP_MAX_KV_SETS
# from this many rows on, a block matrix (model/block_matrix.py) dequantizes and runs a dense
# GEMM (unless lanes_gemm keeps it in the kernels' integer lanes); fewer take the kernels' tiles
# or lanes.  (The memory estimate reserves the dense path's buffers, the larger of the two.)
# benchmarks/dense_crossover.py on a 2-core AMD EPYC (Zen 4): the tiles beat dequantize + GEMM
# by 10-60% from 32 to 128 rows for every SmolLM2 Q4_1 and Gemma 3 Q4_K_M layer shape, at the
# AVX-512 and the AVX2 level; at 256 the two are about even, at 512 the GEMM wins or ties.
DENSE_ROWS = 128
QMATRIX_DENSE_ROWS = 32  # the same for the PyTorch fallback without a C compiler (model/qmatrix.py)
DEQUANT_CHUNK = 1 << 21  # dense path: weights dequantized at a time (elements)
# the K-quants' prompt products on int8 activations (kernels/c/q8mm_x86.h, AVX512-VNNI, AVX2): from
# this many rows, a block of 32 whose max |x| exceeds this many times its rms keeps its residual,
# and a product with more than this fraction of such blocks takes int8 alone (lp_q8mm_takes)
Q8MM_ROWS = 64
Q8MM_RATIO = 4.0
Q8MM_MAX_FLAGGED = 0.02
# the types of a scale per 32 (kernels/c/q8mm32_x86.h): the most residual tiles (a block
# column's outlier blocks, 6 rows a tile) per int8 tile a product still takes int8 at
Q8MM32_MAX_FIXES = 0.6  # (the speed crossover: kernels/c/q8mm32_x86.h)
# their outlier ratio by kernel level (a block with max |x| above this many times its rms keeps its residual)
Q8MM32_RATIO = {"avx512": 3.0, "avx2": 4.0}


# KV cache types the C attention and the fused layers read (-ctk / -ctv), by their GGML type:
# f16 and ggml's blocks of 32 (kernels/c/kv_quant.c); f32, bf16 and iq4_nl take PyTorch's path.
C_KV_TYPES = {"f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}
KV_WIDEN = 256  # cells of a block-typed cache an attention task widens to f32 at a time (kernels/c/attn.c)


def c_kv_types(type_k: str, type_v: str, d_k: int, d_v: int) -> tuple[int, int] | None:
    """The GGML types of a cache the C attention reads, or None: both types in C_KV_TYPES, and
    block-typed heads whole blocks of 32."""
    tk, tv = C_KV_TYPES.get(type_k), C_KV_TYPES.get(type_v)
    if tk is None or tv is None or (type_k != "f16" and d_k % 32) or (type_v != "f16" and d_v % 32):
        return None
    return tk, tv


def attn_kv_scratch_bytes(d_k: int, d_v: int) -> int:
    """One thread's scratch of the few-row attention over a block-typed cache (kernels/c/attn.c
    lp_attn_kv_floats at its KV_WIDEN cells): the widened K and V rows, their mask values and
    indices, a part's outputs for up to 64 heads, and a row's canonical form."""
    d = max(d_k, d_v)
    wrow = d + 2 * (d // 16) * 4 + 64
    return 4 * (KV_WIDEN * (d_k + d_v + 3) + 64 * (d_v + 2) + (wrow + 3) // 4 + 32)


def tile_attention(n_rows: int, flash: bool, type_k: str, type_v: str, d_k: int, d_v: int, n_head: int,
                   n_head_kv: int) -> bool:
    """Does a ubatch of n_rows attend through the many-row C kernel (kernels/c/attn_tiles.c),
    with the kernels on: FAST_ROWS rows or more, flash attention over an f16 cache, head sizes
    a multiple of 4 and whole KV groups (what lp_attn_tiles_f16 takes).  Fewer rows take the
    few-row kernel; anything else PyTorch's SDPA over the cache widened to fp32."""
    return (n_rows >= FAST_ROWS and flash and type_k == type_v == "f16" and d_k % 4 == 0 and d_v % 4 == 0
            and n_head % n_head_kv == 0)


def block_nbytes(qtype: T, n_out: int, n_in: int) -> int:
    """Bytes of a [n_out, n_in] matrix of `qtype` in its GGUF blocks."""
    be, bb = gguf.GGML_QUANT_SIZES[qtype]
    return n_out * (n_in // be) * bb


def blocks_fit(qtype: T, n_in: int) -> bool:
    """The kernels read rows of this type and length (whole blocks)."""
    return qtype in BLOCK_TYPES and n_in % gguf.GGML_QUANT_SIZES[qtype][0] == 0


def bf16_gemm(qtype: T, cpu_bf16: bool, coarse_many: bool = True) -> bool:
    """Does a many-row product of this type run as a bf16 GEMM (else fp32 or the lanes)?
    coarse_many: this bf16 CPU's coarse block types take bf16 GEMMs (kernels/calibrate.py's
    many-row choice, KernelLib.coarse_many_bf16: a core whose integer lanes are clearly faster
    keeps them there); BF16 weights always do."""
    if not cpu_bf16 or qtype not in BF16_GEMM_TYPES:
        return False
    return qtype == T.BF16 or coarse_many


def lanes_gemm(qtype: T, level: str, cpu_bf16: bool, coarse_many: bool = True) -> bool:
    """Does a product of DENSE_ROWS rows or more of this type stay in the kernels' integer lane
    products (kernels/c/lanes_x86.c) instead of dequantize + fp32 GEMM?  At the AVX-512 level
    (vpdpwssd on 512 bits) for the block types the CPU does not take in bf16: a 2-core AMD EPYC
    (Zen 4) ran 512-row products of Gemma 3's Q5_0, Q8_0, Q4_K and Q6_K shapes 1.24-1.41x
    faster than PyTorch's fp32 GEMM with the dequantization.  At the AVX2 level (vpmaddwd on
    256 bits) only for the types of one scale per block of 32 (BLOCK32_TYPES: one conversion
    and FMA per 16 pairs): there the same CPU ran SmolLM2's Q4_1 and Q8_0 shapes and Gemma 3's
    Q5_0 1.09-1.54x the GEMM at 256 and 512 rows, but not the K-quants: Q4_K tied, and Q6_K,
    whose scales per 16 halve the integer run between conversions, lost (0.69-0.75x)
    (benchmarks/dense_crossover.py).  The arithmetic is the one-row path's (int16 activations,
    an error of at most 1/65278 of each block's largest value)."""
    if qtype not in BLOCK_TYPES or qtype in FLOAT_TYPES or bf16_gemm(qtype, cpu_bf16, coarse_many):
        return False
    return level == "avx512" or (level == "avx2" and qtype in BLOCK32_TYPES)


def mm_scratch_bound(n_in: int) -> int:
    """At least lp_mm's scratch per thread for rows of n_in (kernels/c/mm.c
    lp_mm_scratch_bytes: the largest of the fp32 tiles', a lane tile's, a twin tile's and the
    AMX weight tiles' of a 64-row task: amx_x86.c 100 bytes a value, amxk_x86.c's Q4_K / Q5_K / Q6_K
    about 130 and its 128 rows' 64 outputs, 32 KiB), and lp_mm_q8's (a 32-row weight panel with
    its scales and, at the AVX512-VNNI level, the 16 rows decoded before their transpose: 66.5 bytes
    a value); tests/test_kernels.py holds the bound."""
    return 160 * n_in + 32768 + 1024


def amxk_slice_rows(n_in: int) -> int:
    """Rows per kernel call of a product on amxk_x86.c's tiles (Q4_K / Q5_K / Q6_K prompts where the
    CPU has AMX-INT8): its activation buffer (int8 rows, a scale per 256 and a sum per 32: 1.14
    bytes a value, kernels/c/mm_xprep.inc amxk_bytes) within the lane slice's budget, at most 512
    rows.  Each call packs the whole matrix for the tiles once, so a 512-row ubatch in one call:
    Llama 3.1 8B's ffn_down (14336 wide) had taken the lanes' 96-row slices, six packs."""
    return max(16, min(512, DEQUANT_CHUNK * 4 // (n_in + n_in // 8 + n_in // 64) // 16 * 16))


def q8mm_slice_rows(n_in: int) -> int:
    """Rows per lp_mm_q8 call: its activation buffer (int8 rows and residuals, scales, sums: under
    3 bytes a value) within the lane slice's 6-7 that memory/estimate.py budgets."""
    return 2 * lanes_slice_rows(n_in)


def q8mm_bytes_bound(n_rows: int, n_in: int, n_threads: int) -> int:
    """At least lp_mm_q8's memory for n_rows rows of n_in in BlockMatrix's slices: one slice's
    activations (kernels/c/q8mm_x86.c q8x_bytes: under 3 bytes a value; at the AVX2 level also the
    rows in Q8_K, q8p_x86.c lp_q8p_x_bytes: under 1.2, and two row lists of 8 bytes a row) and each
    thread's panel."""
    rows = min(n_rows, q8mm_slice_rows(n_in))
    return (4 * n_in + n_in // 4 + 16) * rows + 2048 + n_threads * mm_scratch_bound(n_in)


def lanes_slice_rows(n_in: int) -> int:
    """Rows per kernel call of a many-row lane product: its activation buffers (about 6 bytes a
    value: int16 rows, their lanes, bf16) stay within the dense path's dequantized chunk, and
    at most 256 rows, whose lanes each weight tile streams whole from L2: on a 2-core Intel
    Xeon (KVM, family 6 model 167, 2 MiB L2 a core) SmolLM2's Q4_1 layer shapes at 512 rows
    took 17.0 ms in one slice and 12.1-13.4 in slices of 128-256, Gemma 3's 15.8 and 9.4-10.5
    (benchmarks/dense_crossover.py --rows 512, AVX-512 level); 32-row slices, which decode
    every weight row 16 times, 10.7."""
    return max(16, min(256, DEQUANT_CHUNK * 4 // (6 * n_in) // 16 * 16))
