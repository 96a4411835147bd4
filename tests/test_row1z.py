"""On x86 one to four activation rows of the 32-element types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
take kernels/c/row1z_x86.c's int16 products (512-bit vectors at the AVX-512 level, 256-bit at
AVX2; one row: four weight rows a pass, a chunk's tail of one to three rows one at a time):
within fp32 order of the exact product of the int16-rounded x, and each of 2-4 rows bit for bit
the same row alone (the same integers, scales and float steps whatever the rows beside it,
whatever the pass a weight row falls in).  At AVX2 without VNNI the 4- and 5-bit types' one row
reads int8 by default and their 2+ rows take the int8 lanes (test_row_counts_i8.py): their
int16 one row is checked here, forced."""
from __future__ import annotations

import gguf
import pytest
import torch

from llamapy.model.block_matrix import block_matrix
from kernel_level import kernels_at, row1_i8
from test_kernels import _matrix

T = gguf.GGMLQuantizationType
TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


@pytest.fixture(scope="module", params=["avx512", "avx2+vnni", "avx2"])
def lib(request):
    return kernels_at(request.param)


def _int16_rounded(x: torch.Tensor) -> torch.Tensor:
    """x as the int16 activations read it: per block of 32, s = max|x| / 32639, x / s rounded to
    nearest even, times s (lp.h's LP_XQ_MAX)."""
    b = x.double().reshape(x.shape[0], -1, 32)
    s = b.abs().amax(-1, keepdim=True) / 32639
    q = torch.where(s > 0, torch.round(b / torch.where(s > 0, s, 1)), 0)
    return (q * s).reshape(x.shape)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n_out", [68, 37, 66, 131])  # a 16-row chunk's tail past passes of four: 0, 1, 2, 3
def test_few_rows_each_as_alone(lib, qtype, n_out):
    n_in = 7 * 32  # an odd number of blocks
    raw, W = _matrix(qtype, (n_out, n_in), seed=n_out)
    m = block_matrix([(raw, qtype, (n_out, n_in))], lib)
    x = torch.randn(4, n_in, generator=torch.Generator().manual_seed(n_out + 1))
    x[1, 32:64] *= 1e-3  # a quiet block: its own scale
    x[2, :32] = 0.0  # a zero block
    with row1_i8(lib, 0):  # (lp_row1_i8_set(1) would read one row as ggml's Q8_0: test_row1_i8.py)
        one = torch.cat([m(x[r:r + 1]) for r in range(4)])
        ref = (_int16_rounded(x) @ W.double().T).float()
        scale = ref.abs().max().item()
        assert (one - ref).abs().max().item() <= 2e-6 * scale, "one row: not the int16 products"
        if lib.fn.lp_lanes8_takes(int(qtype), n_in, 2):
            return  # (AVX2 without VNNI: 2+ rows of the 4- and 5-bit types in int8 lanes, test_row_counts_i8.py)
        for rows in (2, 3, 4):
            assert torch.equal(m(x[:rows]), one[:rows]), f"{rows} rows: not each row's bits alone"
