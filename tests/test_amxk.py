"""Q4_K / Q5_K / Q6_K prompts on AMX tiles with the activations in ggml's Q8_K (kernels/c/amxk_x86.c):
the sums against numpy's rounding of the same activations with the same weights, each row its own
at any row count the path takes, accumulation into y, and the switch back to amx_x86.c."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from llamapy.kernels import load_kernels
from llamapy.model.block_matrix import block_matrix
from test_kernels import _matrix

T = gguf.GGMLQuantizationType
XQ_MAX = np.float32(127.0)  # kernels/c/amxk_x86.h LP_AMXK_QMAX: ggml's Q8_K


@pytest.fixture(scope="module")
def lib():
    k = load_kernels()
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off")
    if not k.amx:
        pytest.skip(f"{k.isa}: no AMX-INT8 here (or LLAMAPY_AMX=0): prompts take the lanes or int8 products")
    yield k
    k.fn.lp_amxk_set(1)


def _mm(m, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
    """lp_mm itself (no int8 or dense path), adding into y where given."""
    out = torch.zeros(x.shape[0], m.n_out) if y is None else y
    m._mm(x.contiguous(), out, accumulate=y is not None, int8=0)
    return out


def _parts(raw: torch.Tensor, qtype: T, shape) -> tuple[np.ndarray, np.ndarray]:
    """The weights' two parts, float64 [n_out, n_in]: d sc q (dmin zeroed) and -dmin m (d zeroed);
    Q6_K, d sc (q - 32) without minima: the weights and zeros."""
    if qtype == T.Q6_K:
        w = gguf.quants.dequantize(raw.numpy().reshape(shape[0], -1), qtype).astype(np.float64)
        return w, np.zeros_like(w)
    bb = gguf.GGML_QUANT_SIZES[qtype][1]
    blocks = raw.numpy().reshape(-1, bb)
    out = []
    for zero in (slice(2, 4), slice(0, 2)):  # block_q4_K / q5_K: d at bytes 0-1, dmin at 2-3
        b = blocks.copy()
        b[:, zero] = 0
        out.append(gguf.quants.dequantize(b.reshape(shape[0], -1), qtype).astype(np.float64))
    return out[0], out[1]


def _rounded(x: torch.Tensor) -> np.ndarray:
    """x as the kernel rounds it, float64: per 256 values s = max|x| / LP_XQ_MAX, xq = rint(x * (LP_XQ_MAX / max))
    in float32 steps, times s."""
    b = x.numpy().astype(np.float32).reshape(x.shape[0], -1, 256)
    amax = np.abs(b).max(-1, keepdims=True)
    inv = np.where(amax > 0, XQ_MAX / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.rint((b * inv).astype(np.float32))
    s = (amax / XQ_MAX).astype(np.float32)
    return (q.astype(np.float64) * s).reshape(x.shape)


@pytest.mark.parametrize("qtype,rows", [(T.Q4_K, 150), (T.Q5_K, 150), (T.Q4_K, 140), (T.Q6_K, 150), (T.Q6_K, 140)],
                         ids=lambda v: getattr(v, "name", v))
def test_sums_are_the_rounded_activations(lib, qtype, rows):
    """The product is the weights times x rounded per super-block (ggml's Q8_K), the minima too
    (ggml's bsums: the minima then cancel the offset d sc q carries; with x's exact block sums
    Gemma 3's KLD from llama.cpp's logits was 3x), up to fp32 order (1e-5 of the largest output, measured 1.2-1.4e-7;
    the rounding itself moves the outputs 2e-2, measured below, so a wrong rounding, scale or
    row-tile cannot hide)."""
    shape = (80, 768)  # 3 super-blocks; 5 groups of 16 weight rows (a 64-row task and a tail of 16)
    raw, ref = _matrix(qtype, shape, seed=3)
    m = block_matrix([(raw, qtype, shape)], lib)
    # 150 rows: a 128-row slab and one of 22 (two row-tiles, the second past the rows); 140: the last
    # slab's 12 rows one row-tile
    x = torch.randn(rows, shape[1], generator=torch.Generator().manual_seed(4))
    x[7, 300] = 40.0  # an outlier: its super-block's step 40x the others'
    y = _mm(m, x).numpy().astype(np.float64)
    wd, wm = _parts(raw, qtype, shape)
    assert np.abs(wd + wm - ref.numpy()).max() <= 1e-6 * np.abs(ref.numpy()).max()  # the two parts are the weights
    want = _rounded(x) @ (wd + wm).T
    scale = np.abs(want).max()
    err = np.abs(y - want).max() / scale
    exact = np.abs(y - x.numpy().astype(np.float64) @ ref.numpy().astype(np.float64).T).max() / scale
    print(f"{qtype.name}: |y - rounded product| {err:.2e}, |y - exact product| {exact:.2e} of the largest")
    assert err < 1e-5
    assert exact < 5e-2  # (ggml's Q8_K, one int8 scale per 256, as llama.cpp: 2.1e-2 here, the outlier's row)


def test_rows_are_their_own_and_accumulate(lib):
    """Every row's sums are its own at any row count the path takes (128 rows and up: the rows'
    scales and the float steps' order do not depend on the other rows), and accumulate adds (y
    takes each super-block's step in turn: y's own value first, so fp32 order, not bits)."""
    shape = (48, 512)
    raw, _ = _matrix(T.Q4_K, shape, seed=5)
    m = block_matrix([(raw, T.Q4_K, shape)], lib)
    x = torch.randn(200, shape[1], generator=torch.Generator().manual_seed(6))
    full = _mm(m, x)
    for n in (128, 130, 143, 161):
        assert torch.equal(_mm(m, x[:n]), full[:n]), n
        assert torch.equal(_mm(m, x[200 - n:]), full[200 - n:]), n
    base = torch.randn(200, shape[0], generator=torch.Generator().manual_seed(7))
    added = _mm(m, x, base.clone())
    assert (added - (base + full)).abs().max() <= 1e-6 * full.abs().max()
    assert not torch.equal(added, full)


def test_switch_restores_the_lanes_sums(lib):
    """lp_amxk_set(0): amx_x86.c's products, the int16 lanes' sums per block of 32 (fewer rows take
    the lanes themselves: 64 + 64), which differ from the super-block rounding's."""
    shape = (32, 512)
    raw, _ = _matrix(T.Q4_K, shape, seed=8)
    m = block_matrix([(raw, T.Q4_K, shape)], lib)
    x = torch.randn(128, shape[1], generator=torch.Generator().manual_seed(9))
    superblock = _mm(m, x)
    was = lib.fn.lp_q8kz_set(0)  # (AVX-512 VNNI's 64 rows read Q8_K otherwise: test_q8kz.py)
    try:
        lanes = torch.cat([_mm(m, x[:64]), _mm(m, x[64:])])
    finally:
        lib.fn.lp_q8kz_set(was)
    lib.fn.lp_amxk_set(0)
    try:
        assert torch.equal(_mm(m, x), lanes)
    finally:
        lib.fn.lp_amxk_set(1)
    assert not torch.equal(superblock, lanes)


def test_q6k_prompts_take_the_tiles(lib):
    """Q6_K from DENSE_ROWS rows takes amxk's tiles, not lp_mm_q8's int8 panels (which keep 64..127
    rows): lp_q8mm_takes says no, and the product called as a model calls it (BlockMatrix.__call__,
    add_into) is lp_mm's, the super-block rounding's sums (with LLAMAPY_AMXK's switch off, the
    int8 panels' again: their rounding per 32 differs)."""
    shape = (48, 512)
    raw, _ = _matrix(T.Q6_K, shape, seed=10)
    m = block_matrix([(raw, T.Q6_K, shape)], lib)
    x = torch.randn(130, shape[1], generator=torch.Generator().manual_seed(11))
    assert lib.fn.lp_q8mm_takes(int(T.Q6_K), x.data_ptr(), shape[1], 130) == 0
    assert lib.fn.lp_q8mm_takes(int(T.Q6_K), x.data_ptr(), shape[1], 100) != 0
    tiles = _mm(m, x)
    assert torch.equal(m(x), tiles)
    base = torch.randn(130, shape[0], generator=torch.Generator().manual_seed(12))
    assert (m.add_into(x, base.clone()) - (base + tiles)).abs().max() <= 1e-6 * tiles.abs().max()
    lib.fn.lp_amxk_set(0)
    try:
        assert lib.fn.lp_q8mm_takes(int(T.Q6_K), x.data_ptr(), shape[1], 130) != 0
        assert not torch.equal(m(x), tiles)
    finally:
        lib.fn.lp_amxk_set(1)


def test_slices_of_512_rows():
    """amxk's products run in slices of up to 512 rows at every width of the 8B shape (each call
    packs the whole matrix: the 14336-wide ffn_down had taken the lanes' 96-row slices), within
    the lanes' activation budget (1.14 bytes a value: kernels/c/mm_xprep.inc amxk_bytes)."""
    from llamapy.kernels.types import DEQUANT_CHUNK, amxk_slice_rows
    for n_in in (2048, 4096, 8192, 14336):
        rows = amxk_slice_rows(n_in)
        assert rows == 512, n_in
        assert rows * (n_in + n_in // 8 + n_in // 64) <= DEQUANT_CHUNK * 4
    assert amxk_slice_rows(65536) == 112
