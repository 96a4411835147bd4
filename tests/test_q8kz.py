"""A verification's or a batched decode's 2 to 127 rows of Q4_K and Q6_K at the AVX-512 VNNI level,
read as ggml's Q8_K, sixteen weight rows a pass (kernels/c/q8kz_x86.c, mm.c q8kz_chunk): the sums
against the Q8_K-rounded activations times gguf's dequantized weights, each row its own at any row
count, a last pass of 1-15 weight rows, the int32 / int16 sums at their largest (the vpackssdw
step must not saturate), and the outlier rule (a row with an outlier block in int16; more than a
quarter such rows: the whole product in the int16 paths).  One row keeps row1q8k_x86.c's path."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from llamapy.kernels import load_kernels
from llamapy.model.block_matrix import block_matrix
from q8k_checks import check_outlier_rows, close as _close, mm_plain as _mm
from test_kernels import _matrix, q8k_rounded

T = gguf.GGMLQuantizationType


@pytest.fixture(scope="module")
def lib():
    k = load_kernels("native")
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off")
    if not k.fn.lp_q8kz_takes(16):
        pytest.skip(f"{k.isa}: no AVX-512 VNNI, the 16+-row products stay in the int16 lanes")
    k.fn.lp_cpu_q8k_few_set(1)  # (2-4 rows take q8kz where the one-row kernels read Q8_K: not on Zen 4 by default)
    yield k
    k.fn.lp_cpu_q8k_few_set(-1)


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
@pytest.mark.parametrize("n_out", [45, 17, 31])
def test_batched_rows_are_the_q8k_product(lib, qtype, n_out):
    """45 / 17 / 31 weight rows (chunks of 16, a last one of 13 / 1 / 15: a pass of 16 rows with
    3 / 15 / 1 of them repeats whose sums are dropped) x 2048 (8 super-blocks): every row count
    2..18 and some to 127 within 1e-5 of the largest output of the Q8_K-rounded product (fp32
    order; the rounding moves outputs ~1e-2, so a wrong scale, minimum or lane cannot hide), each
    row bit for bit the same at every row count (2..15 too: the last pass of 1-3 activation rows,
    each row's place in y), and not the int16 paths' sums (lp_q8kz_set(0): the lanes at 16, the
    twin lanes at 5-8, the fp32 tiles at 9-15)."""
    shape = (n_out, 2048)
    raw, W = _matrix(qtype, shape, seed=31)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(127, shape[1], generator=torch.Generator().manual_seed(32))
    assert lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), shape[1], 16)
    want = (q8k_rounded(x).double() @ W.double().T).float()
    exact = (x.double() @ W.double().T).float()
    assert (want - exact).abs().max().item() > 1e-3 * exact.abs().max().item()  # (the rounding shows)
    y127 = _mm(m, x)
    for n in (*range(2, 19), 33, 64, 100, 127):
        y = _mm(m, x[:n])
        assert _close(y, want[:n], 1e-5), n
        assert torch.equal(y, y127[:n]), n
    for lo in (1, 6):  # rows lo..lo+n: a row's sums its own in any place of the batch
        for n in (2, 3, 5, 9):
            assert torch.equal(_mm(m, x[lo:lo + n]), y127[lo:lo + n]), (lo, n)
    was = lib.fn.lp_q8kz_set(0)
    try:
        others = {n: _mm(m, x[:n]) for n in (5, 8, 9, 15, 16)}
    finally:
        lib.fn.lp_q8kz_set(was)
    for n, y in others.items():
        assert _close(y, exact[:n], 1e-4) and not _close(y, want[:n], 1e-5), n


def _extreme(qtype: T, n_out: int, n_in: int, seed: int) -> np.ndarray:
    """Blocks whose integer sums reach the bounds: Q4_K every nibble 15, every scale and minimum 63;
    Q6_K every 6-bit value 63 (or 0: q - 32 = -32) with scales +-127; d and dmin random positive."""
    rng = np.random.default_rng(seed)
    nsb = n_in // 256
    if qtype == T.Q4_K:
        b = np.zeros((n_out, nsb, 144), np.uint8)
        b[..., 0:2] = np.frombuffer(np.float16(rng.uniform(1e-3, 2e-3, n_out * nsb)).tobytes(), np.uint8).reshape(n_out, nsb, 2)
        b[..., 2:4] = np.frombuffer(np.float16(rng.uniform(1e-4, 2e-4, n_out * nsb)).tobytes(), np.uint8).reshape(n_out, nsb, 2)
        b[..., 4:16] = 0xFF  # scales and minimums all 63
        b[..., 16:] = 0xFF  # every nibble 15
    else:
        b = np.zeros((n_out, nsb, 210), np.uint8)
        b[..., 0:192] = rng.choice([0x00, 0xFF], size=(n_out, nsb, 1))  # all 63 or all 0 per block
        b[..., 192:208] = rng.choice([0x7F, 0x81], size=(n_out, nsb, 16)).astype(np.uint8)  # scales +127 / -127
        b[..., 208:210] = np.frombuffer(np.float16(rng.uniform(1e-3, 2e-3, n_out * nsb)).tobytes(), np.uint8).reshape(n_out, nsb, 2)
    return b.reshape(n_out, -1)


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_largest_sums_do_not_saturate(lib, qtype):
    """Every weight at its largest against rows whose Q8_K values are all +-127 (constant sign per
    row, and alternating): the int32 sums of a sub-block reach 8 * 15 * 127 (Q4_K) and
    4 * 63 * 127 (Q6_K) before the int16 pack; the outputs stay the Q8_K product's, at 2..16 rows."""
    shape = (8, 512)
    q = _extreme(qtype, *shape, seed=33)
    raw = torch.from_numpy(np.ascontiguousarray(q)).view(torch.uint8).reshape(-1)
    W = torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(q, qtype), dtype=np.float32))
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.ones(16, shape[1])
    x[1::2] *= -1.0
    x[2] = torch.tensor([1.0, -1.0]).repeat(shape[1] // 2)
    x[3] = torch.tensor([-1.0, 1.0]).repeat(shape[1] // 2)
    x[4] = -1.0
    x[4, ::256] = 1.0  # (the first largest positive: the other values' Q8_K all +127)
    want = (q8k_rounded(x).double() @ W.double().T).float()
    for n in (2, 3, 5, 16):  # (a last activation pass of 2, 3, 1 and 4 rows)
        y = _mm(m, x[:n])
        assert _close(y, want[:n], 1e-5), (n, (y - want[:n]).abs().max().item())


def test_outlier_rows_keep_int16(lib):
    """The outlier rule on Q6_K (q8k_checks.check_outlier_rows)."""
    check_outlier_rows(lib, T.Q6_K, seed=34, rows_taken=16)


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_few_rows_outlier_rule(lib, qtype):
    """2..15 rows with row 1 holding an outlier block: from 4 rows (a quarter) row 1 alone takes the
    int16 one-row product (within 1e-4 of the exact product; Q8_K would be ~1e-2 off) and every
    other row keeps its Q8_K sums bit for bit; at 2 and 3 rows the whole product leaves q8kz (the
    others then row1q8k_x86.c's Q8_K where lp_cpu_q8k_few, else the split int16 form)."""
    shape = (33, 2048)
    raw, W = _matrix(qtype, shape, seed=35)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(15, shape[1], generator=torch.Generator().manual_seed(36))
    clean = _mm(m, x)
    x[1, 900] = 60.0
    exact = (x.double() @ W.double().T).float()
    want = (q8k_rounded(x).double() @ W.double().T).float()
    assert not _close(want[1], exact[1], 1e-3)  # (Q8_K would show)
    for n in range(2, 16):
        y = _mm(m, x[:n])
        keep = [r for r in range(n) if r != 1]
        assert _close(y[1], exact[1], 1e-4), n
        if n >= 4:
            assert torch.equal(y[keep], clean[keep]), n
        else:
            assert _close(y[keep], want[keep], 1e-5) or _close(y[keep], exact[keep], 1e-4), n


def test_row_counts_taken(lib):
    """1 row keeps row1q8k_x86.c's path and 128 the prompt's: no q8kz; 2..127 rows prepare Q8_K
    and take it for Q4_K / Q6_K alone -- 2-4 rows only where lp_cpu_q8k_few (on Zen 4 they keep
    the split int16 form)."""
    assert not lib.fn.lp_q8kz_takes(1) and not lib.fn.lp_q8kz_takes(128)
    assert all(lib.fn.lp_q8kz_takes(n) for n in (2, 3, 4, 5, 8, 9, 15, 16, 127))
    lib.fn.lp_cpu_q8k_few_set(0)
    try:
        assert not any(lib.fn.lp_q8kz_takes(n) for n in (1, 2, 3, 4))
        assert all(lib.fn.lp_q8kz_takes(n) for n in (5, 15, 16))
    finally:
        lib.fn.lp_cpu_q8k_few_set(1)
