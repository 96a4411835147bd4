"""The Q4_K / Q6_K products of 1-4 activation rows on ggml's Q8_K activations (kernels/c/row1q8k_x86.c)
at every x86 level, the VNNI ones included (lp.h LP_Q8K_FEW: native, avx2+vnni): against an
int8-rounded reference (tests/test_kernels.py q8k_rounded), each row its own one-row product, the
two-weight-rows pass and the single last row alike, and the VNNI levels' sums bit for bit the
avx2 level's (vpdpwssd adds the same int32 products vpmaddwd + vpaddd do)."""
from __future__ import annotations

import gguf
import pytest
import torch

from llamapy.kernels import load_kernels
from llamapy.kernels.build import IsaError
from llamapy.model.block_matrix import block_matrix
from test_kernels import _matrix, q8k_rounded

T = gguf.GGMLQuantizationType
SHAPE = (37, 2048)  # an odd number of weight rows (the last one alone after the pairs), 8 super-blocks a row


def level(name: str):
    """The kernels of this level, or a skip saying why this CPU has none."""
    try:
        k = load_kernels(name)
    except IsaError as e:
        pytest.skip(f"this CPU does not run the {name} level: {e}")
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off")
    return k


@pytest.fixture(scope="module", params=["avx512", "avx2+vnni", "avx2"])
def lib(request):
    return level(request.param)


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_few_rows_read_q8k(lib, qtype):
    """1-4 rows without an outlier block read x as Q8_K: within fp32 order of the product of the
    int8-rounded x, each row bit for bit its one-row product; 5 rows do not (x86 with VNNI: the
    integer lanes or bf16; without: mm.c q8k_chunk, tests/test_kernels.py)."""
    raw, W = _matrix(qtype, SHAPE, seed=21)
    m = block_matrix([(raw, qtype, SHAPE)], lib)
    x = torch.randn(4, SHAPE[1], generator=torch.Generator().manual_seed(22))
    vnni = "vnni" in lib.isa
    if vnni:
        assert not lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), SHAPE[1], 5)
    ref = (q8k_rounded(x).double() @ W.double().T).float()
    one = torch.cat([m(x[r:r + 1]) for r in range(4)])
    for rows in (1, 2, 3, 4):
        assert lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), SHAPE[1], rows), (lib.isa, rows)
        y = m(x[:rows])
        assert (y - ref[:rows]).abs().max().item() <= 1e-5 * ref[:rows].abs().max().item(), rows
        assert torch.equal(y, one[:rows]), rows


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_vnni_levels_are_the_avx2_sums(lib, qtype):
    """The VNNI levels' one-row Q8_K products are the avx2 level's bit for bit (the same int32 sums,
    the same float steps), one row and four."""
    if lib.level == "avx2" and "vnni" not in lib.isa:
        pytest.skip("the avx2 level is the reference here")
    base = level("avx2")
    raw, _ = _matrix(qtype, SHAPE, seed=23)
    x = torch.randn(4, SHAPE[1], generator=torch.Generator().manual_seed(24))
    for rows in (1, 4):
        assert torch.equal(block_matrix([(raw, qtype, SHAPE)], lib)(x[:rows]), block_matrix([(raw, qtype, SHAPE)], base)(x[:rows]))
