"""At the AVX2 level without VNNI (kernels/c/lanes8_x86.h LP_LANES8) Q4_0 / Q4_1 / Q5_0 / Q5_1 read x
as ggml's Q8_0 at every row count: one row through det8_row_x86.c (row1_x86.h lp_row1_i8, on by
default there), 2 rows and more through the int8 lanes (mm_xprep.inc lanes8_rows).  Both round x
with the same function's bits (ggml's Q8_0: max |x| / 127, nearest even) and take the same integer
sums and float steps per block, so a row of a 2-, 3-, 9- or 15-row ubatch (a speculative
verification, a batched server, embeddings in a batch) has the bits of the same row alone, and of
--deterministic's.  Q8_0 keeps its int16 paths (its one row not int8 by default)."""
from __future__ import annotations

import gguf
import pytest
import torch

from llamapy.model.block_matrix import block_matrix
from kernel_level import kernels_at, row1_i8
from test_kernels import _matrix, q8_0_rounded

T = gguf.GGMLQuantizationType
TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]
COUNTS = (2, 3, 4, 9, 12, 15)


@pytest.fixture(scope="module")
def avx2():
    return kernels_at("avx2")


def test_every_count_takes_int8(avx2):
    for qtype in TYPES:
        assert avx2.fn.lp_row1_i8(int(qtype), 640), qtype
        for n in range(2, 20):
            assert avx2.fn.lp_lanes8_takes(int(qtype), 640, n), (qtype, n)
        assert not avx2.fn.lp_lanes8_takes(int(qtype), 656, 3), qtype  # 656: not whole blocks of 32
    assert not avx2.fn.lp_row1_i8(int(T.Q8_0), 640)  # Q8_0 keeps int16 at every count
    assert not avx2.fn.lp_lanes8_takes(int(T.Q8_0), 640, 3)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_one_row_is_its_row_in_any_ubatch(avx2, qtype):
    """37 weight rows of 21 blocks; 15 activation rows (an outlier block in row 1): each row alone
    (one-row path) equals, bit for bit, that row inside 2, 3, 4, 9, 12 and 15-row products and a
    slice from row 5, equals --deterministic's, and is the Q8_0-rounded product within fp32 order."""
    shape = (37, 672)
    raw, W = _matrix(qtype, shape, seed=51)
    m = block_matrix([(raw, qtype, shape)], avx2)
    x = torch.randn(15, shape[1], generator=torch.Generator().manual_seed(52)) * 2.0
    x[1, 100] = 70.0
    alone = torch.cat([m(x[r : r + 1]) for r in range(15)])
    ref = (q8_0_rounded(x).double() @ W.double().T).float()
    scale = ref.abs().max().item()
    assert (alone - ref).abs().max().item() <= 2e-6 * scale
    assert torch.equal(alone, m.det(x))
    for n in COUNTS:
        assert torch.equal(m(x[:n]), alone[:n]), n
    assert torch.equal(m(x[5:8]), alone[5:8])
    acc = torch.ones(3, shape[0])
    m.add_into(x[:3], acc)
    assert (acc - 1 - alone[:3]).abs().max().item() <= 1e-6 * scale


def test_fused_steps_take_it(tmp_path):
    """The fused layers (lp_layers) of a Q5_0 model at avx2: a lone sequence's one-row steps read x in
    int8 by default (other logits than with lp_row1_i8_set(0)'s int16 one row), and 3 sequences in
    one 3-row ubatch a step (the int8 lanes) give sequence 0 the lone sequence's argmax.  (The two
    runs' prompts differ, 3 sequences' 120 rows in one per-op ubatch against 40, and this tiny model's
    random weights amplify that float order to ~1% of the largest logit, so the bits are held at the
    matrix level above and, for the fused steps, in test_row_invariance.py.)"""
    from llamapy import Model
    from llamapy.kernels import load_kernels
    from tiny_model import write_tiny_llama
    from test_kernels import _decode_steps

    kernels_at("avx2")
    lib = load_kernels()
    if lib is None or lib.level != "avx2":
        pytest.skip("the session's kernels are not the avx2 level (LLAMAPY_CPU_ISA)")
    model = Model.load(write_tiny_llama(tmp_path / "q5_0.gguf", weight_type=T.Q5_0, embd_type=T.F32))
    y1 = _decode_steps(model, 1)
    with row1_i8(lib, 0):
        y16 = _decode_steps(model, 1)
    assert not torch.equal(y1, y16)
    y3 = _decode_steps(model, 3)
    assert torch.equal(y3[:1].argmax(1), y1.argmax(1))
