"""The K-quants' int8 prompt products (kernels/c/q8mm_x86.c) on rows wider than 64 blocks of 32:
q8mm_512.inc's residual pass reads a row's outlier flags 64 blocks at a time (a last part of
fewer), tests/test_q8mm.py's rows have at most 32 blocks."""
from __future__ import annotations

import gguf
import pytest
import torch

from llamapy.kernels.types import Q8MM_MAX_FLAGGED, Q8MM_RATIO
from test_kernels import _matrix
from test_q8mm import lib, minima, product, rounded  # noqa: F401  (lib: the module's fixture)

T = gguf.GGMLQuantizationType


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_residuals_past_the_first_64_blocks(lib, qtype):  # noqa: F811
    """Rows of 2304 values (72 blocks: flags 0..63, then 64..71) with an outlier in block 3, 63,
    64 and 71 of some rows: the residual pass's product equals the reference rounding's with
    those blocks' residuals, to fp32 order -- and differs from int8 alone by more than that."""
    shape, rows = (40, 2304), 70
    raw, W = _matrix(qtype, shape, seed=5)
    x = torch.randn(rows, shape[1], generator=torch.Generator().manual_seed(6))
    for b in (3, 63, 64, 71):
        x[b % 5::5, 32 * b + 9] = 40.0
    M = minima(qtype, raw, shape)
    ref = rounded(x, True, Q8MM_RATIO) @ (W.double() - M).T + x.double() @ M.T
    alone = rounded(x, False) @ (W.double() - M).T + x.double() @ M.T
    scale = ref.abs().max().item()
    assert (ref - alone).abs().max().item() > 1e-4 * scale  # the residuals matter at this tolerance
    lib.fn.lp_q8mm_set(1, Q8MM_RATIO, 1.0)
    try:
        y = product(lib, qtype, raw, shape, x)
    finally:
        lib.fn.lp_q8mm_set(1, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
    assert (y.double() - ref).abs().max().item() <= 2e-6 * scale
