"""--deterministic's attention takes a call's rows in twos (attn.c pair_task -> attn_det_x86.c lp_attn_pair_det at
the AVX-512 level: the cells both rows see are loaded and converted once for both).  A row's output must stay the
one it gets alone (a decode: one row a call), bit for bit, whatever its partner: here odd row counts, rows of two
sequences mixed (so pairs straddle sequences), masks with holes (a cell one row sees and its partner does not),
every row its own mask values (a pair reading its partner's mask shows), and rows in a shuffled order (a row's
visible cells, or its chunk, ending inside its partner's chunk).  Every level runs it (AVX2 and scalar: rows alone)."""
from __future__ import annotations

import numpy as np
import pytest

from test_deterministic_attn import SHAPES, _cache, attend, lib  # noqa: F401  (lib: the fixture, every level)


def _seq_rows(shape, cells: np.ndarray, seed: int, holes: bool):
    """Rows of one sequence: row i sees cells[: i + 1], with holes: odd rows from 9 on miss the cell at place 5
    (and rows from 70 on every 7th row the one at place 60 too); mask values drawn per (row, cell)."""
    rng = np.random.default_rng(seed)
    n_head, _, d = shape
    q = (rng.standard_normal((len(cells), n_head * d)) * 1.5).astype(np.float32)
    rows = []
    for i in range(len(cells)):
        seen = np.ones(i + 1, bool)
        if holes and i >= 9 and i % 2:
            seen[5] = False
        if holes and i >= 70 and i % 7 == 0:
            seen[60] = False
        bias = np.where(rng.random(i + 1) < 0.3, rng.uniform(-2, 0.5, i + 1), 0.0).astype(np.float32)
        rows.append((q[i], cells[: i + 1][seen], bias[seen]))
    return rows


@pytest.mark.parametrize("name", list(SHAPES))
def test_det_attention_pairs_equal_alone(lib, name):
    shape = SHAPES[name]
    k, v, mine, other = _cache(shape[1], shape[2], seed=7 + len(name))
    a, b = _seq_rows(shape, mine, seed=11, holes=False), _seq_rows(shape, other[:101], seed=12, holes=True)
    alone_a = [attend(lib, shape, k, v, [r]) for r in a]
    alone_b = [attend(lib, shape, k, v, [r]) for r in b]
    rng = np.random.default_rng(5)
    calls = {  # name: rows as (sequence, index)
        "a, 149 rows (odd)": [("a", i) for i in range(1, 150)],
        "b with holes, 101 rows": [("b", i) for i in range(101)],
        "a 0..6 (7 rows)": [("a", i) for i in range(7)],
        "a and b mixed, runs of 3": [(s, i) for j in range(0, 99, 3) for s in "ab" for i in range(j, j + 3)],
        "a shuffled": [("a", int(i)) for i in rng.permutation(150)[:77]],
        "a and b shuffled": [(s, int(i)) for s, i in zip(rng.choice(["a", "b"], 91), rng.permutation(101)[:91])],
    }
    bad = {}
    for key, idx in calls.items():
        rows = [(a if s == "a" else b)[i] for s, i in idx]
        want = np.concatenate([(alone_a if s == "a" else alone_b)[i] for s, i in idx])
        got = attend(lib, shape, k, v, rows)
        if not np.array_equal(got, want):
            diff = np.abs(got - want).max(axis=1)
            bad[key] = (float(diff.max()), [idx[r] for r in np.flatnonzero(diff)[:4].tolist()])
    assert not bad, f"{lib.level}: rows differ from alone (max |diff|, first rows): {bad}"
