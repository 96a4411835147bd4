"""The K-quants' prompt products on int8 activations (kernels/c/q8mm_x86.c, AVX512-VNNI and
AVX2): the integers and scales against numpy's rounding of the same activations, the outlier blocks'
residual pass, and which products take it."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from llamapy.kernels.types import Q8MM32_MAX_FIXES, Q8MM32_RATIO, Q8MM_MAX_FLAGGED, Q8MM_RATIO, Q8MM_ROWS
from kernel_level import kernels_at
from test_kernels import _matrix

T = gguf.GGMLQuantizationType
# the bytes of a block holding its quants (zeroed, a block dequantizes to its minima alone)
QUANT_BYTES = {T.Q4_K: (16, 144), T.Q5_K: (16, 176), T.Q4_1: (4, 20), T.Q5_1: (4, 24)}
BLOCK32 = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]  # kernels/c/q8mm32_x86.c


@pytest.fixture(scope="module", params=["avx512", "avx2+vnni", "avx2"])
def lib(request):
    """The AVX512-VNNI products (q8mm_512.inc) and the AVX2 level's (q8mm_256.inc: vpdpbusd with
    AVX-VNNI, its tiles of 6 rows for Q4_K / Q5_K, else vpmaddubsw), the latter's Q8_K panel
    (q8p_x86.c, tests/test_q8p.py) switched off here: every row in these int8 rows."""
    k = kernels_at(request.param)
    if not k.fn.lp_q8mm_covers(int(T.Q4_K), 256, Q8MM_ROWS):
        pytest.skip(f"{k.isa}: no AVX512-VNNI in this avx512 build (or LLAMAPY_Q8MM=0): prompts stay in the int16 lanes")
    was = k.fn.lp_q8p_set(0)
    yield k
    k.fn.lp_q8p_set(was)
    k.fn.lp_q8mm_set(1, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
    k.fn.lp_q8mm32_set(Q8MM32_MAX_FIXES, Q8MM32_RATIO[k.level])


def outliers(x: torch.Tensor, ratio: float) -> np.ndarray:
    """[n, k / 32] bool: the blocks whose max |x| exceeds ratio x their rms (q8_prep_row's rule)."""
    b = x.numpy().astype(np.float64).reshape(x.shape[0], -1, 32)
    amax = np.abs(b).max(-1)
    return (amax > 0) & (amax * amax * 32 > ratio * ratio * (b * b).sum(-1))


def rounded(x: torch.Tensor, residual: bool, ratio: float | None = None) -> torch.Tensor:
    """x [n, k] as the kernel rounds it, float64: per block of 32 s = max|x| / 127, q = rint(x / s);
    with the residual r = x - q s kept as rint(r / (s / 254)) (the float32 steps of q8_prep_row),
    in every block or (ratio) in the outlier blocks alone."""
    b = x.numpy().astype(np.float32).reshape(x.shape[0], -1, 32)
    amax = np.abs(b).max(-1, keepdims=True)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.rint((b * inv).astype(np.float32))
    s = (amax / np.float32(127)).astype(np.float32)
    h = q.astype(np.float64) * s
    if residual:
        r = (b.astype(np.float64) - q * s.astype(np.float64)).astype(np.float32)
        rq = np.clip(np.rint((r * (np.float32(254) * inv)).astype(np.float32)), -127, 127)
        if ratio is not None:
            rq = rq * outliers(x, ratio)[..., None]
        h = h + rq * (s / np.float32(254)).astype(np.float64)
    return torch.from_numpy(h.reshape(x.shape))


def minima(qtype: T, raw: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """The matrix's minima part [n_out, n_in] (zero for Q6_K): its blocks with the quants zeroed."""
    if qtype not in QUANT_BYTES:
        return torch.zeros(shape, dtype=torch.float64)
    bb = gguf.GGML_QUANT_SIZES[qtype][1]
    blocks = raw.numpy().reshape(-1, bb).copy()
    a, e = QUANT_BYTES[qtype]
    blocks[:, a:e] = 0
    return torch.from_numpy(gguf.quants.dequantize(blocks.reshape(shape[0], -1), qtype).astype(np.float64))


def product(lib, qtype: T, raw: torch.Tensor, shape, x: torch.Tensor, accumulate: int = 0, residual: int = 1) -> torch.Tensor:
    y = torch.ones(x.shape[0], shape[0])
    assert lib.fn.lp_mm_q8(int(qtype), raw.data_ptr(), shape[0], shape[1], x.data_ptr(), x.shape[0], y.data_ptr(),
                        shape[0], accumulate, residual) == 0
    return y


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q5_K, T.Q6_K] + BLOCK32, ids=lambda t: t.name)
@pytest.mark.parametrize("rows,shape", [(64, (72, 512)), (67, (45, 768)), (130, (33, 256)), (101, (96, 1024)),
                                        (71, (40, 352)), (68, (40, 512)), (69, (24, 256))])
def test_int8_products_are_the_rounded_activations(lib, qtype, rows, shape):
    """Every row count (a last tile of 1..5 rows, tiles of 4 and 6), weight rows past whole panels of 32, and the
    residual add: the kernel's result is the rounded activations' exact product with the
    weights' scaled quants plus the minima's with the exact activations (the blocks' float
    sums), to fp32 order; without outliers (ratio 0), with every block's residual (a tiny
    ratio), and int8 alone (lp_mm_q8's residual 0: no residual whatever the ratio).  The types
    of a scale per 32 (Q4_0 .. Q8_0, signed weights offset to unsigned bytes) also take rows of
    352 (11 blocks); the K-quants need whole super-blocks."""
    if shape[1] % 256 and qtype not in BLOCK32:
        pytest.skip(f"{qtype.name}: rows of {shape[1]} are not whole super-blocks of 256")
    raw, W = _matrix(qtype, shape, seed=rows)
    x = torch.randn(rows, shape[1], generator=torch.Generator().manual_seed(rows))
    x[::5, 7] *= 30  # outliers
    M = minima(qtype, raw, shape)
    for residual, ratio, alone in ((False, 0.0, 0), (True, 1e-3, 0), (False, 1e-3, 1)):
        lib.fn.lp_q8mm_set(1, ratio, 1.0)
        lib.fn.lp_q8mm32_set(1.0, ratio)
        xh = rounded(x, residual)
        ref = xh @ (W.double() - M).T + x.double() @ M.T
        y = product(lib, qtype, raw, shape, x, residual=1 - alone)
        scale = ref.abs().max().item()
        assert (y.double() - ref).abs().max().item() <= 2e-6 * scale, (residual, alone, rows)
        acc = product(lib, qtype, raw, shape, x, accumulate=1, residual=1 - alone)
        assert (acc - 1 - y).abs().max().item() <= 1e-6 * scale
    lib.fn.lp_q8mm_set(1, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
    lib.fn.lp_q8mm32_set(Q8MM32_MAX_FIXES, Q8MM32_RATIO[lib.level])


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q5_K, T.Q6_K, *BLOCK32], ids=lambda t: t.name)
def test_largest_quants_do_not_overflow(lib, qtype):
    """Every quant at its largest (15, 31, and Q6_K's 31 + 32 = 63; Q4_0 / Q5_0's 7 + 8, 15 + 16;
    Q8_0's -128) against activations all at +-127: the AVX2 level's int16 sums (q8mm_256.inc:
    8, 4, 2 steps of vpmaddubsw pairs before vpmaddwd; q8mm32_256.inc: 8, 4, and Q8_0's |w| x
    sign(x, w) one step) at their bound, and the product still the exact one."""
    n_out, n_in = 16, 512
    qk, bb = gguf.GGML_QUANT_SIZES[qtype]
    # every quant bit set, scales too (Q8_0: every quant -128)
    blocks = np.full((n_out * n_in // qk, bb), 0x80 if qtype == T.Q8_0 else 0xFF, np.uint8)
    d = np.frombuffer(np.float16(1e-3).tobytes(), np.uint8)
    ats = [bb - 2] if qtype == T.Q6_K else [0] if qtype in (T.Q4_0, T.Q5_0, T.Q8_0) else [0, 2]
    for at in ats:  # d (and dmin / m) a small float
        blocks[:, at:at + 2] = d
    raw = torch.from_numpy(blocks.reshape(-1).copy())
    W = torch.from_numpy(gguf.quants.dequantize(blocks.reshape(n_out, -1), qtype).astype(np.float64))
    x = torch.ones(Q8MM_ROWS + 3, n_in)
    x[1::2] = -1.0
    lib.fn.lp_q8mm_set(1, Q8MM_RATIO, 1.0)
    M = minima(qtype, raw, (n_out, n_in))
    ref = rounded(x, False) @ (W - M).T + x.double() @ M.T
    y = product(lib, qtype, raw, (n_out, n_in), x)
    lib.fn.lp_q8mm_set(1, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
    assert (y.double() - ref).abs().max().item() <= 2e-6 * ref.abs().max().item()


def test_outlier_blocks_take_the_residual(lib):
    """At the default ratio only blocks whose max stands out of their rms keep a residual
    (lp_q8mm_flagged), and the product of such rows is int16-exact (1e-4 of the exact product),
    where int8 alone is not."""
    shape = (64, 512)
    raw, W = _matrix(T.Q4_K, shape, seed=2)
    x = torch.randn(96, shape[1], generator=torch.Generator().manual_seed(3))
    assert lib.fn.lp_q8mm_flagged(x.data_ptr(), shape[1], 96) < 0.01  # gaussian blocks: max / rms about 2.3
    x[:, ::32] = 100.0  # one value of every block stands out (max / rms about 5.6)
    assert lib.fn.lp_q8mm_flagged(x.data_ptr(), shape[1], 96) == 1.0
    ref = x.double() @ W.double().T
    err = {}
    for ratio in (0.0, Q8MM_RATIO):
        lib.fn.lp_q8mm_set(1, ratio, 1.0)
        err[ratio] = ((product(lib, T.Q4_K, raw, shape, x).double() - ref).abs().max() / ref.abs().max()).item()
    lib.fn.lp_q8mm_set(1, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
    assert err[Q8MM_RATIO] <= 1e-4 < err[0.0]


def test_which_products_take_it(lib):
    """K-quants (Q4_K, Q5_K, Q6_K) of whole super-blocks from Q8MM_ROWS rows; not the other
    types, fewer rows, or with the path off (LLAMAPY_Q8MM=0's switch); and of those only
    products whose activations have at most Q8MM_MAX_FLAGGED outlier blocks (every 4th row
    looked at) take the residual pass (1); the others int8 alone (2; the model's BlockMatrix asks
    lp_q8mm_takes)."""
    n_in = 512
    x = torch.randn(96, n_in, generator=torch.Generator().manual_seed(4))
    assert lib.fn.lp_q8mm_takes(int(T.Q4_K), x.data_ptr(), n_in, 96) == 1
    x[::4, 32 * 2] = 100.0  # one block of 16 in the rows looked at: 1 / 16 of them outliers
    assert lib.fn.lp_q8mm_takes(int(T.Q4_K), x.data_ptr(), n_in, 96) == 2
    assert lib.fn.lp_q8mm_takes(int(T.Q4_K), x.data_ptr(), n_in, Q8MM_ROWS - 1) == 0
    x[::4, 32 * 2] = 0.0
    x[1::4, :] = 100.0 * (torch.arange(n_in) % 32 == 0)  # rows not looked at: outliers, still the residual pass
    assert lib.fn.lp_q8mm_takes(int(T.Q4_K), x.data_ptr(), n_in, 96) == 1
    covers = lib.fn.lp_q8mm_covers
    for qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        assert covers(int(qtype), 2048, Q8MM_ROWS) == (not lib.amx or qtype == T.Q6_K)
        assert not covers(int(qtype), 2048, Q8MM_ROWS - 1)
    for qtype in BLOCK32:  # (kernels/c/q8mm32_x86.c) rows of whole blocks of 32; not yet Q4_1 / Q5_1
        assert covers(int(qtype), 2048 + 32, Q8MM_ROWS) == (not lib.amx and qtype not in (T.Q4_1, T.Q5_1))
        assert not covers(int(qtype), 2048 + 16, 512)
    for qtype in (T.Q2_K, T.Q3_K, T.F16):
        assert not covers(int(qtype), 2048, 512)
    lib.fn.lp_q8mm_set(0, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
    try:
        assert not covers(int(T.Q6_K), 2048, 512)
    finally:
        lib.fn.lp_q8mm_set(1, Q8MM_RATIO, Q8MM_MAX_FLAGGED)


def test_block_matrix_slices_rows_within_the_budget(lib):
    """BlockMatrix calls lp_mm_q8 in slices of q8mm_slice_rows (the activation buffer stays in
    what memory/estimate.py budgets for a lane slice), and each row's product does not depend on
    the slice it fell in: equal, bit for bit, to one call over all rows."""
    from llamapy.kernels.types import lanes_slice_rows, q8mm_slice_rows
    from llamapy.model.block_matrix import BlockMatrix

    n_in, n_out = 8192, 40
    step = q8mm_slice_rows(n_in)
    assert 3 * n_in * step <= 7 * lanes_slice_rows(n_in) * n_in
    rows = step + 70  # two slices, the second past Q8MM_ROWS
    raw, _ = _matrix(T.Q4_K, (n_out, n_in), seed=9)
    x = torch.randn(rows, n_in, generator=torch.Generator().manual_seed(9))
    assert lib.fn.lp_q8mm_takes(int(T.Q4_K), x.data_ptr(), n_in, rows)
    whole = product(lib, T.Q4_K, raw, (n_out, n_in), x)
    bm = BlockMatrix(n_out, n_in, T.Q4_K, raw, lib)
    assert torch.equal(bm(x), whole)


def test_outlier_heavy_products_take_int8_alone(lib):
    """A SwiGLU-like product whose blocks are mostly outliers (Llama 3.2's ffn_down: 49-72% of
    them) goes through BlockMatrix, at either level, to lp_mm_q8 with int8 alone (lp_q8mm_takes
    2; the int16 lanes at the AVX512-VNNI level before, the fp32 GEMM at AVX2): each row's
    product is that of its int8 rounding without residuals, bit for bit the kernel's residual-0
    call, and within 1e-2 of the exact product (ggml-cpu's Q8_K activations have one scale per
    256 values, these one per 32)."""
    from llamapy.model.block_matrix import BlockMatrix

    n_out, n_in, rows = 48, 1024, Q8MM_ROWS + 5
    raw, W = _matrix(T.Q4_K, (n_out, n_in), seed=11)
    g = torch.Generator().manual_seed(11)
    x = torch.nn.functional.silu(2 * torch.randn(rows, n_in, generator=g)) * torch.randn(rows, n_in, generator=g)
    assert lib.fn.lp_q8mm_flagged(x.data_ptr(), n_in, rows) > 5 * Q8MM_MAX_FLAGGED
    y = BlockMatrix(n_out, n_in, T.Q4_K, raw, lib)(x)
    exact = x.double() @ W.double().T
    err = (y.double() - exact).abs().max().item() / exact.abs().max().item()
    assert lib.fn.lp_q8mm_takes(int(T.Q4_K), x.data_ptr(), n_in, rows) == 2
    assert torch.equal(y, product(lib, T.Q4_K, raw, (n_out, n_in), x, residual=0))
    M = minima(T.Q4_K, raw, (n_out, n_in))
    ref = rounded(x, False) @ (W.double() - M).T + x.double() @ M.T
    assert (y.double() - ref).abs().max().item() <= 2e-6 * ref.abs().max().item()
    assert 1e-4 < err <= 1e-2


@pytest.mark.parametrize("qtype", BLOCK32, ids=lambda t: t.name)
def test_block32_residuals_by_column(lib, qtype):
    """The types of a scale per 32 add the outlier blocks' residuals per block column (each
    column's flagged rows gathered 6 at a time, whichever rows they are): at the default ratio
    the product is the rounded activations' with exactly the flagged blocks' residuals (odd
    rows, a column flagged in most rows, one in a few, scattered blocks); without the residuals
    (ratio 0) the outlier blocks' int8 steps make the error several times larger."""
    shape, rows = (45, 352), 131
    lib.fn.lp_q8mm32_set(Q8MM32_MAX_FIXES, Q8MM_RATIO)  # (4: no randn block flagged; the default 3 flags some)
    raw, W = _matrix(qtype, shape, seed=5)
    x = torch.randn(rows, shape[1], generator=torch.Generator().manual_seed(5))
    x[: rows - 9, 32 * 3 + 5] = 40.0  # block column 3: flagged in most rows
    x[[2, 17, 18, 60, 130], 32 * 7 + 1] = -25.0  # column 7: in five
    x[11, 32 * 10 + 31] = 33.0  # the last column, one row
    flags = outliers(x, Q8MM_RATIO)
    assert flags[:, 3].sum() == rows - 9 and flags[:, 7].sum() == 5 and flags.sum() == rows - 9 + 6
    M = minima(qtype, raw, shape)
    ref = rounded(x, True, Q8MM_RATIO) @ (W.double() - M).T + x.double() @ M.T
    y = product(lib, qtype, raw, shape, x)
    scale = ref.abs().max().item()
    assert (y.double() - ref).abs().max().item() <= 2e-6 * scale
    exact = x.double() @ W.double().T
    lib.fn.lp_q8mm32_set(Q8MM32_MAX_FIXES, 0.0)
    try:
        plain = product(lib, qtype, raw, shape, x)
    finally:
        lib.fn.lp_q8mm32_set(Q8MM32_MAX_FIXES, Q8MM32_RATIO[lib.level])
    err, err_plain = ((y.double() - exact).abs().max().item(), (plain.double() - exact).abs().max().item())
    print(f"{qtype.name}: max |error| {err:.4f} with the residuals, {err_plain:.4f} without")
    assert 3 * err < err_plain


def test_block32_rule_counts_residual_tiles(lib):
    """lp_q8mm32_fixes: per block column its outlier blocks over 6, rounded up, per int8 tile
    (rows / 6 x blocks); lp_q8mm_takes takes a Q5_0 product up to Q8MM32_MAX_FIXES of them
    (every 4th row looked at, each counting 4) and leaves the rest to the int16 lanes."""
    n_in, rows = 640, 96
    nb, tiles = n_in // 32, rows // 6
    x = torch.randn(rows, n_in, generator=torch.Generator().manual_seed(6))
    fixes = lambda every: lib.fn.lp_q8mm32_fixes(x.data_ptr(), n_in, rows, Q8MM_RATIO, every)
    lib.fn.lp_q8mm32_set(Q8MM32_MAX_FIXES, Q8MM_RATIO)  # (4: no randn block flagged)
    assert fixes(1) == 0.0 and lib.fn.lp_q8mm_takes(int(T.Q5_0), x.data_ptr(), n_in, rows)
    x[:, 32 * 4] = 50.0  # one column flagged in every row: 16 residual tiles of 16 x 20
    x[7, 32 * 9] = 50.0  # and one block elsewhere: one more
    assert fixes(1) == pytest.approx((16 + 1) / (tiles * nb))
    assert fixes(4) == pytest.approx(16 / (tiles * nb))  # (row 7 is not looked at)
    assert lib.fn.lp_q8mm_takes(int(T.Q5_0), x.data_ptr(), n_in, rows) == (fixes(4) <= Q8MM32_MAX_FIXES)
    k = int(Q8MM32_MAX_FIXES * nb) + 1  # that many columns flagged in every row: over the rule
    x[:, 32 * torch.arange(k)] = 50.0
    assert fixes(4) > Q8MM32_MAX_FIXES
    assert not lib.fn.lp_q8mm_takes(int(T.Q5_0), x.data_ptr(), n_in, rows)
    lib.fn.lp_q8mm32_set(1.0, Q8MM_RATIO)
    try:
        assert lib.fn.lp_q8mm_takes(int(T.Q5_0), x.data_ptr(), n_in, rows)
    finally:
        lib.fn.lp_q8mm32_set(Q8MM32_MAX_FIXES, Q8MM32_RATIO[lib.level])
