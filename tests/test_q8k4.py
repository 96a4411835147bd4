"""A batched decode's 5 to 63 rows of Q4_K and Q6_K on x86 without VNNI, read as ggml's Q8_K with four
weight rows interleaved per vector (kernels/c/q8k4_x86.c, mm.c q8k_chunk): the sums against
the Q8_K-rounded activations times gguf's dequantized weights, each row its own at any row count,
a weight-row tail of 1-3 rows, and the outlier rule (a row with an outlier block in int16, more
than a quarter such rows: the whole product in the int16 lanes)."""
from __future__ import annotations

import gguf
import pytest
import torch

from llamapy.kernels import load_kernels
from llamapy.model.block_matrix import block_matrix
from q8k_checks import check_outlier_rows, mm_plain as _mm
from test_kernels import _matrix, q8k_rounded

T = gguf.GGMLQuantizationType


@pytest.fixture(scope="module", params=["native", "avx2", "scalar"])
def lib(request):
    k = load_kernels(request.param)
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off")
    return k


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_batched_rows_are_the_q8k_product(lib, qtype):
    """45 weight rows (chunks of 16, 16, 13: a last pass of one weight row) x 2048 (8 super-blocks):
    every row count 5..63 within 1e-5 of the largest output of the Q8_K-rounded product (fp32
    order; the rounding itself moves outputs ~1e-2, so a wrong scale, minimum or lane cannot
    hide), and each row bit for bit the same at every row count (its integers and float steps
    are its own)."""
    shape = (45, 2048)
    raw, W = _matrix(qtype, shape, seed=21)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(63, shape[1], generator=torch.Generator().manual_seed(22))
    if not lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), shape[1], 5):
        pytest.skip(f"{lib.isa}: a batched decode's {qtype.name} in int16 (VNNI: AVX-512's 16+ rows in test_q8kz.py; or not x86)")
    want = (q8k_rounded(x).double() @ W.double().T).float()
    exact = (x.double() @ W.double().T).float()
    assert (want - exact).abs().max().item() > 1e-3 * exact.abs().max().item()  # (the rounding shows)
    y63 = _mm(m, x)
    for n in (5, 6, 7, 9, 16, 17, 33, 63):
        y = _mm(m, x[:n])
        assert (y - want[:n]).abs().max().item() <= 1e-5 * want[:n].abs().max().item(), n
        assert torch.equal(y, y63[:n]), n


def test_outlier_rows_keep_int16(lib):
    """The outlier rule on Q4_K (q8k_checks.check_outlier_rows)."""
    check_outlier_rows(lib, T.Q4_K, seed=23, rows_taken=5)
