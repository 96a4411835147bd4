"""The KQ-mask rule: the vectorised kq_mask_np must equal the scalar visible() on every
(row, cell) pair, and visible() must equal the rule written out from llama.cpp's
set_input_kq_mask / is_masked_swa."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from llamapy.memory.cells import KVCells
from llamapy.memory.mask_rule import SwaType, is_masked_swa, kq_mask_np, visible

N_SEQ = 3

cell_st = st.one_of(st.none(), st.tuples(st.integers(0, 30), st.sets(st.integers(0, N_SEQ - 1), min_size=1)))
query_st = st.tuples(st.integers(0, N_SEQ - 1), st.integers(0, 35))


def build(cells_spec) -> KVCells:
    cells = KVCells(len(cells_spec), N_SEQ)
    for i, c in enumerate(cells_spec):
        if c is not None:
            cells.set_cell(i, c[0], sorted(c[1]))
    return cells


def rule(c, q_seq: int, q_pos: int, n_swa: int, swa_type: SwaType, causal: bool) -> bool:
    """Written from llama.cpp: skip empty cells, other sequences, the future, and the window."""
    if c is None or q_seq not in c[1]:
        return False
    p0 = c[0]
    if causal and p0 > q_pos:
        return False
    if swa_type == SwaType.STANDARD and q_pos - p0 >= n_swa:
        return False
    if swa_type == SwaType.CHUNKED and p0 < (q_pos // n_swa) * n_swa:
        return False
    if swa_type == SwaType.SYMMETRIC and abs(q_pos - p0) > n_swa // 2:
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(spec=st.lists(cell_st, min_size=1, max_size=20), queries=st.lists(query_st, min_size=1, max_size=8),
       n_swa=st.integers(1, 8), swa_type=st.sampled_from(list(SwaType)), causal=st.booleans(),
       data=st.data())
def test_vectorised_mask_equals_scalar_rule(spec, queries, n_swa, swa_type, causal, data):
    cells = build(spec)
    n_kv = data.draw(st.integers(0, len(spec)))
    q_seq = np.array([q[0] for q in queries])
    q_pos = np.array([q[1] for q in queries])
    mask = kq_mask_np(cells, n_kv, q_seq, q_pos, n_swa=n_swa, swa_type=swa_type, causal=causal)
    assert mask.shape == (len(queries), n_kv) and mask.dtype == bool
    for r, (s, p) in enumerate(queries):
        for j in range(n_kv):
            want = rule(spec[j], s, p, n_swa, swa_type, causal)
            assert visible(cells, j, s, p, n_swa=n_swa, swa_type=swa_type, causal=causal) == want
            assert mask[r, j] == want, (r, j)


def test_mask_example_two_sequences_share_a_prefix():
    cells = KVCells(8, 2)
    for i in range(3):
        cells.set_cell(i, i, (0, 1))  # shared prefix 0..2
    cells.set_cell(3, 3, (0,))
    cells.set_cell(4, 3, (1,))
    mask = kq_mask_np(cells, 6, np.array([0, 1, 1]), np.array([3, 3, 2]))
    assert mask.astype(int).tolist() == [
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 0, 1, 0],
        [1, 1, 1, 0, 0, 0],
    ]


def test_standard_window_edges():
    # LLAMA_SWA_TYPE_STANDARD, n_swa = 4: query at 10 sees keys 7..10, not 6
    assert [is_masked_swa(4, SwaType.STANDARD, p, 10) for p in (6, 7, 10)] == [True, False, False]
    assert not is_masked_swa(4, SwaType.NONE, 0, 10_000)
    cells = KVCells(12, 1)
    for i in range(12):
        cells.set_cell(i, i, (0,))
    row = kq_mask_np(cells, 12, np.array([0]), np.array([10]), n_swa=4, swa_type=SwaType.STANDARD)[0]
    assert np.flatnonzero(row).tolist() == [7, 8, 9, 10]


def test_bad_arguments():
    cells = KVCells(4, 1)
    with pytest.raises(ValueError, match=r"n_kv \(5\)"):
        kq_mask_np(cells, 5, np.array([0]), np.array([0]))
    with pytest.raises(ValueError, match=r"n_swa \(0\)"):
        kq_mask_np(cells, 4, np.array([0]), np.array([0]), n_swa=0, swa_type=SwaType.STANDARD)
