"""With lp_row1_i8_set(1) (off by default but at the AVX2 level without VNNI for Q4_0 / Q4_1 / Q5_0 /
Q5_1: kernels/c/row1_x86.h says why), one activation row of the
32-element types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) on x86 reads x as ggml's Q8_0 through
--deterministic's one-row kernel (det8_row_x86.c), in lp_mm and in the fused layers' one-row
ubatches: the product is --deterministic's bits, and a one-sequence decode differs from the int16
form's, while several rows keep the int16 form."""
from __future__ import annotations

import gguf
import pytest
import torch

from llamapy.kernels import load_kernels
from llamapy.model.block_matrix import block_matrix
from kernel_level import kernels_at, row1_i8
from test_kernels import _decode_steps, _matrix, q8_0_rounded

T = gguf.GGMLQuantizationType
TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


@pytest.fixture(scope="module", params=["avx512", "avx2+vnni", "avx2", "scalar"])
def lib(request):
    return kernels_at(request.param)


def _takes(lib, qtype) -> bool:
    """Where the one-row Q8_0 form is expected: x86, and Q8_0 only with VNNI or at AVX2."""
    if lib.level == "scalar":
        return False
    return qtype != T.Q8_0 or "vnni" in lib.isa or lib.level == "avx2"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_one_row_is_the_deterministic_product(lib, qtype):
    shape = (37, 640)  # 20 blocks a row, an odd number of weight rows
    raw, W = _matrix(qtype, shape, seed=31)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(2, shape[1], generator=torch.Generator().manual_seed(32))
    # off by default but at the AVX2 level without VNNI for the four types lanes8 takes (row1_x86.h;
    # an AVX-VNNI CPU's avx2 level is "avx2+vnni": off there)
    lanes8 = lib.level == "avx2" and "vnni" not in lib.isa and qtype != T.Q8_0
    assert bool(lib.fn.lp_row1_i8(int(qtype), shape[1])) == lanes8, lib.isa
    with row1_i8(lib, 0):
        y16 = m(x[:1])
    with row1_i8(lib, 1):
        assert bool(lib.fn.lp_row1_i8(int(qtype), shape[1])) == _takes(lib, qtype), lib.isa
        y = m(x[:1])
    if not _takes(lib, qtype):
        return
    assert torch.equal(y, m.det(x[:1]))
    ref = (q8_0_rounded(x[:1]).double() @ W.double().T).float()
    assert (y - ref).abs().max().item() <= 1e-5 * ref.abs().max().item()
    assert not torch.equal(y, y16)  # the int16 form: other bits
    # two rows: the int16 form, row 0 within its rounding of the exact product, not the Q8_0 one;
    # at the AVX2 level the four types' int8 lanes: the one row's bits (tests/test_row_counts_i8.py)
    exact = (x.double() @ W.double().T).float()
    if lanes8:
        assert torch.equal(m(x)[:1], y)
        return
    assert (m(x)[:1] - exact[:1]).abs().max().item() <= 1e-4 * exact.abs().max().item()


def test_fused_decode_takes_it(tmp_path):
    """A one-sequence decode through the fused layers (lp_layers) of a Q4_1 model (its tied output
    f32: lp_mm's one row not Q8_0): other logits with the Q8_0 form turned on, the same argmax."""
    from llamapy import Model
    from tiny_model import write_tiny_llama

    lib = load_kernels()
    if lib is None or lib.level == "scalar":
        pytest.skip("the one-row Q8_0 form is x86's")
    model = Model.load(write_tiny_llama(tmp_path / "q4_1.gguf", weight_type=T.Q4_1, embd_type=T.F32))
    with row1_i8(lib, 0):
        y16 = _decode_steps(model, 1)
    with row1_i8(lib, 1):
        y8 = _decode_steps(model, 1)
    assert not torch.equal(y8, y16)
    assert torch.equal(y8.argmax(1), y16.argmax(1))
    assert (y8 - y16).abs().max().item() <= 6e-2 * y16.abs().max().item()
