"""KVCells against a brute-force model (a list of (pos, set of seqs) per cell, written the
plainest way from llama.cpp's loops), driven by random operation sequences; plus unit tests
of the seq_* semantics, find_slot and snapshot/restore."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from llamapy.memory.cells import KVCells
from llamapy.memory.mask_rule import SwaType

SIZE, N_SEQ = 12, 3
INF = 2**31 - 1


@dataclass
class MCell:
    pos: int = -1
    seqs: set[int] = field(default_factory=set)
    shift: int = 0
    written: int = -1  # position when written / at the last reset_shift


class Model:
    """The reference: per-cell Python objects, one loop per operation, no caching."""

    def __init__(self) -> None:
        self.cells = [MCell() for _ in range(SIZE)]
        self.head = 0
        self.has_shift = False

    def free(self, c: MCell) -> None:
        c.pos, c.seqs, c.shift, c.written = -1, set(), 0, -1

    def seq_pos(self, s: int) -> list[int]:
        return [c.pos for c in self.cells if c.pos >= 0 and s in c.seqs]

    def used(self) -> int:
        return sum(c.pos >= 0 for c in self.cells)

    def seq_rm(self, s, p0, p1) -> int:
        p0, p1 = max(p0, 0), (INF if p1 < 0 else p1)
        first, n = None, 0
        for i, c in enumerate(self.cells):
            if not (c.pos >= 0 and p0 <= c.pos < p1) or (s >= 0 and s not in c.seqs):
                continue
            c.seqs.discard(s) if s >= 0 else c.seqs.clear()
            if not c.seqs:
                self.free(c)
                n += 1
                first = i if first is None else first
        if first is not None and first < self.head:
            self.head = first
        return n

    def seq_cp(self, src, dst, p0, p1) -> None:
        if src == dst:
            return
        p0, p1 = max(p0, 0), (INF if p1 < 0 else p1)
        for c in self.cells:
            if c.pos >= 0 and p0 <= c.pos < p1 and src in c.seqs:
                c.seqs.add(dst)

    def seq_keep(self, s) -> None:
        first = None
        for i, c in enumerate(self.cells):
            if s in c.seqs:
                c.seqs = {s}
            elif c.pos >= 0:
                self.free(c)
                first = i if first is None else first
        if first is not None and first < self.head:
            self.head = first

    def seq_add(self, s, p0, p1, delta) -> None:
        p0, p1 = max(p0, 0), (INF if p1 < 0 else p1)
        if delta == 0 or p0 == p1:
            return
        first = None
        for i, c in enumerate(self.cells):
            if c.pos >= 0 and p0 <= c.pos < p1 and s in c.seqs:
                self.has_shift = True
                c.pos += delta
                c.shift += delta
                if c.pos < 0:
                    self.free(c)
                    first = i if first is None else first
        self.head = first if first is not None else 0

    def seq_div(self, s, p0, p1, d) -> None:
        p0, p1 = max(p0, 0), (INF if p1 < 0 else p1)
        if d == 1 or p0 == p1:
            return
        for c in self.cells:
            if c.pos >= 0 and p0 <= c.pos < p1 and s in c.seqs:
                self.has_shift = True
                new = c.pos // d
                c.shift += new - c.pos
                c.pos = new

    def usable(self, i, n_swa) -> bool:
        c = self.cells[i]
        if c.pos < 0:
            return True
        if n_swa > 0 and len(c.seqs) == 1:
            (t,) = c.seqs
            return max(self.seq_pos(t)) + 1 - c.pos >= n_swa
        return False

    def find_slot(self, n, head, n_swa) -> list[int] | None:
        if head > self.used() + 2 * n:
            head = 0
        found = [(head + k) % SIZE for k in range(SIZE) if self.usable((head + k) % SIZE, n_swa)]
        return found[:n] if len(found) >= n else None

    def apply(self, idxs, pos, sids) -> None:
        max_rm: dict[int, int] = {}
        for i, p, ss in zip(idxs, pos, sids):
            c = self.cells[i]
            if c.pos >= 0:
                for t in c.seqs:
                    max_rm[t] = max(max_rm.get(t, -1), c.pos)
                self.free(c)
            c.pos, c.seqs, c.shift, c.written = p, set(ss), 0, p
        for t, p_rm in max_rm.items():
            ps = self.seq_pos(t)
            if ps and min(ps) <= p_rm:
                self.seq_rm(t, min(ps), p_rm + 1)
        self.head = idxs[-1] + 1


def check_equal(cells: KVCells, m: Model) -> None:
    for i, c in enumerate(m.cells):
        assert cells.pos_get(i) == c.pos, i
        assert cells.is_empty(i) == (c.pos < 0)
        assert set(cells.seq_get_all(i)) == c.seqs, i
        assert cells.seq_count(i) == len(c.seqs)
        assert all(cells.seq_has(i, s) == (s in c.seqs) for s in range(N_SEQ))
        assert cells.get_shift(i) == c.shift, i
        if c.pos >= 0:  # the K-shift invariant: shift = pos now - pos when written
            assert c.shift == c.pos - c.written
    used = [i for i, c in enumerate(m.cells) if c.pos >= 0]
    assert cells.used() == len(used)
    assert cells.used_max_p1() == (used[-1] + 1 if used else 0)
    assert cells.used_min() == (used[0] if used else 0)
    for s in range(N_SEQ):
        ps = m.seq_pos(s)
        assert cells.seq_pos_min(s) == (min(ps) if ps else -1), s
        assert cells.seq_pos_max(s) == (max(ps) if ps else -1), s
    assert cells.head == m.head
    assert cells.has_shift() == m.has_shift


seqs = st.integers(0, N_SEQ - 1)
ps = st.integers(-1, 20)
seq_sets = st.sets(seqs, min_size=1, max_size=N_SEQ).map(sorted)


class CellsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cells = KVCells(SIZE, N_SEQ)
        self.model = Model()
        self.snap: tuple[KVCells, Model] | None = None

    @rule(rows=st.lists(st.tuples(st.integers(0, 20), seq_sets), min_size=1, max_size=5),
          head=st.none() | st.integers(0, SIZE), n_swa=st.sampled_from([0, 0, 2, 4]))
    def write(self, rows, head, n_swa):
        swa = SwaType.STANDARD if n_swa else SwaType.NONE
        got = self.cells.find_slot(len(rows), head, n_swa=n_swa, swa_type=swa)
        want = self.model.find_slot(len(rows), self.model.head if head is None else head, n_swa)
        assert got == want
        if got is not None:
            pos, sids = [p for p, _ in rows], [s for _, s in rows]
            self.cells.apply_ubatch(got, pos, sids)
            self.model.apply(got, pos, sids)

    @rule(s=st.integers(-1, N_SEQ - 1), p0=ps, p1=ps)
    def seq_rm(self, s, p0, p1):
        assert self.cells.seq_rm(s, p0, p1) == self.model.seq_rm(s, p0, p1)

    @rule(src=seqs, dst=seqs, p0=ps, p1=ps)
    def seq_cp(self, src, dst, p0, p1):
        self.cells.seq_cp(src, dst, p0, p1)
        self.model.seq_cp(src, dst, p0, p1)

    @rule(s=seqs)
    def seq_keep(self, s):
        self.cells.seq_keep(s)
        self.model.seq_keep(s)

    @rule(s=seqs, p0=ps, p1=ps, delta=st.integers(-8, 8))
    def seq_add(self, s, p0, p1, delta):
        self.cells.seq_add(s, p0, p1, delta)
        self.model.seq_add(s, p0, p1, delta)

    @rule(s=seqs, p0=ps, p1=ps, d=st.integers(1, 4))
    def seq_div(self, s, p0, p1, d):
        self.cells.seq_div(s, p0, p1, d)
        self.model.seq_div(s, p0, p1, d)

    @rule(i=st.integers(0, SIZE - 1))
    def rm(self, i):
        c = self.model.cells[i]
        if c.pos < 0:
            with pytest.raises(ValueError):
                self.cells.rm(i)
            return
        self.cells.rm(i)
        self.model.free(c)

    @rule()
    def reset_shift(self):
        self.cells.reset_shift()
        self.model.has_shift = False
        for c in self.model.cells:
            c.shift, c.written = 0, c.pos

    @rule()
    def clear(self):
        self.cells.clear()
        self.model = Model()

    @rule()
    def take_snapshot(self):
        import copy
        self.snap = (self.cells.snapshot(), copy.deepcopy(self.model))

    @precondition(lambda self: self.snap is not None)
    @rule()
    def restore_snapshot(self):
        import copy
        snap, model = self.snap
        self.cells.restore(snap)
        self.model = copy.deepcopy(model)

    @invariant()
    def agrees(self):
        check_equal(self.cells, self.model)


CellsMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=20, deadline=None)
TestCellsAgainstModel = CellsMachine.TestCase


# --- unit tests -----------------------------------------------------------------------------

def filled(n: int, seq: tuple[int, ...] = (0,), size: int = 16, n_seq: int = 4) -> KVCells:
    cells = KVCells(size, n_seq)
    for i in range(n):
        cells.set_cell(i, i, seq)
    return cells


def test_whole_range_arguments():
    cells = filled(6)
    assert cells.seq_rm(0, 4, -1) == 2  # p1 < 0: to infinity
    assert cells.seq_pos_max(0) == 3
    assert cells.seq_rm(0, -1, 2) == 2  # p0 < 0: from 0
    assert (cells.seq_pos_min(0), cells.seq_pos_max(0)) == (2, 3)
    assert cells.seq_rm(-1, -1, -1) == 2  # every sequence, every position
    assert cells.used() == 0 and cells.seq_pos_min(0) == -1


def test_seq_cp_shares_cells_and_seq_rm_frees_only_unshared():
    cells = filled(4)
    cells.seq_cp(0, 1, -1, -1)
    assert cells.used() == 4 and cells.seq_pos_max(1) == 3
    assert cells.seq_rm(0, -1, -1) == 0  # still seen by seq 1
    assert cells.seq_pos_max(0) == -1 and cells.used() == 4
    assert cells.seq_rm(1, 2, -1) == 2


def test_seq_keep():
    cells = filled(3, (0, 1))
    cells.set_cell(3, 0, (2,))
    cells.seq_keep(1)
    assert cells.used() == 3 and cells.seq_pos_max(0) == -1 and cells.seq_pos_max(2) == -1
    assert all(cells.seq_get_all(i) == (1,) for i in range(3))


def test_seq_add_shifts_and_frees_negative():
    cells = filled(5)
    cells.head = 5
    cells.seq_add(0, 2, -1, 10)
    assert cells.pos[:5].tolist() == [0, 1, 12, 13, 14]
    assert cells.shift[:5].tolist() == [0, 0, 10, 10, 10] and cells.has_shift()
    assert cells.head == 0  # nothing freed: the next search starts from the beginning
    cells.seq_add(0, -1, 2, -1)  # position 0 -> -1: freed
    assert cells.is_empty(0) and cells.seq_pos_min(0) == 0 and cells.head == 0
    cells.reset_shift()
    assert not cells.has_shift() and not cells.shift.any()


def test_seq_div_shift_is_new_minus_old():
    cells = filled(8)
    cells.seq_div(0, 4, -1, 2)
    assert cells.pos[:8].tolist() == [0, 1, 2, 3, 2, 2, 3, 3]
    assert cells.shift[:8].tolist() == [0, 0, 0, 0, -2, -3, -3, -4]
    assert (cells.seq_pos_min(0), cells.seq_pos_max(0)) == (0, 3)
    with pytest.raises(ValueError, match=r"divisor 0"):
        cells.seq_div(0, -1, -1, 0)


def test_find_slot_wraps_from_head_and_changes_nothing():
    cells = filled(6, size=8)
    cells.rm(1)
    before = cells.snapshot()
    assert cells.find_slot(2, head=5) == [6, 7]
    assert cells.find_slot(3, head=5) == [6, 7, 1]
    assert cells.find_slot(4, head=5) is None
    assert cells.find_slot(2, head=5, cont=True) == [6, 7]
    assert cells.find_slot(3, head=5, cont=True) is None
    assert cells == before


@settings(max_examples=200, deadline=None)
@given(spec=st.lists(st.booleans(), min_size=1, max_size=16), n=st.integers(1, 5), head=st.integers(0, 16))
def test_find_slot_cont_returns_an_adjacent_free_run(spec, n, head):
    cells = KVCells(len(spec), 1)
    for i, busy in enumerate(spec):
        if busy:
            cells.set_cell(i, i, (0,))
    got = cells.find_slot(n, head=head, cont=True)
    runs = [i for i in range(len(spec) - n + 1) if not any(spec[i:i + n])]
    if got is None:
        assert not runs
    else:
        assert got == list(range(got[0], got[0] + n)) and got[0] in runs


@settings(max_examples=200, deadline=None)
@given(spec=st.lists(st.booleans(), min_size=1, max_size=16), n=st.integers(1, 5), head=st.integers(0, 20))
def test_find_slot_takes_the_first_free_cells_from_head(spec, n, head):
    """The first n empty cells in the order head .. size - 1, 0 .. head - 1 (from 0 when head
    lies past used + 2 n): also when the n cells at head are free (find_slot takes them without
    scanning the cache)."""
    cells = KVCells(len(spec), 1)
    for i, busy in enumerate(spec):
        if busy:
            cells.set_cell(i, i, (0,))
    h = 0 if head > sum(spec) + 2 * n else min(head, len(spec))
    free = [i for i in list(range(h, len(spec))) + list(range(h)) if not spec[i]][:n]
    assert cells.find_slot(n, head=head) == (free if len(free) == n else None)


def test_find_slot_far_head_restarts_at_zero():
    cells = KVCells(64, 1)
    # head 40 > used (0) + 2 * 4: llama.cpp starts from the beginning to fill the cache
    assert cells.find_slot(4, head=40) == [0, 1, 2, 3]
    assert cells.find_slot(4, head=8) == [8, 9, 10, 11]


def test_find_slot_swa_reuses_cells_outside_window():
    cells = filled(6, size=6, n_seq=2)  # seq 0 at 0..5, cache full
    assert cells.find_slot(1) is None
    # n_swa = 4: the next query is at 6, so cells 0..2 (6 - p >= 4) are out of every window
    assert cells.find_slot(3, head=0, n_swa=4, swa_type=SwaType.STANDARD) == [0, 1, 2]
    cells.apply_ubatch([0], [6], [(0,)])
    assert cells.seq_pos_min(0) == 1 and cells.seq_pos_max(0) == 6 and cells.head == 1


def test_apply_ubatch_purges_overwritten_prefix():
    cells = filled(4, size=4)
    cells.apply_ubatch([2], [4], [(0,)])  # overwrite position 2: positions 0..2 are purged
    assert cells.pos.tolist() == [-1, -1, 4, 3]
    assert (cells.seq_pos_min(0), cells.seq_pos_max(0)) == (3, 4)


@pytest.mark.parametrize("mixed", [False, True])
def test_apply_ubatch_of_a_prompt_is_set_cell_row_by_row(mixed):
    """FILL_ROWS rows or more into empty cells are written at once (_fill): the same cells,
    sequences, positions, counts and heads as set_cell row by row -- one sequence's prompt, and
    rows of several sequences (one twice in a row's set) beside cells already held."""
    from llamapy.memory.cells import FILL_ROWS

    rng = np.random.default_rng(5)
    n, size = FILL_ROWS + 37, 2 * FILL_ROWS + 100
    ref, got = filled(20, size=size, n_seq=3), filled(20, size=size, n_seq=3)
    idxs = sorted(rng.choice(np.arange(20, size), n, replace=False).tolist())
    pos = rng.integers(0, 500, n).tolist()
    sids = [tuple(int(s) for s in rng.choice(3, rng.integers(1, 3))) + ((0,) if k == 7 else ()) if mixed else (1,)
            for k in range(n)]
    got.apply_ubatch(idxs, pos, sids)
    for i, p, s in zip(idxs, pos, sids):
        ref.set_cell(i, p, s)
    ref.head = idxs[-1] + 1
    assert got == ref and got.used() == ref.used() == 20 + n
    for s in range(3):
        assert (got.seq_pos_min(s), got.seq_pos_max(s)) == (ref.seq_pos_min(s), ref.seq_pos_max(s))
        got.seq_rm(s, -1, 250)
        ref.seq_rm(s, -1, 250)
        assert (got.seq_pos_min(s), got.seq_pos_max(s), got.used()) == (ref.seq_pos_min(s), ref.seq_pos_max(s), ref.used())


def test_set_cell_errors():
    cells = filled(1, n_seq=2)
    with pytest.raises(ValueError, match=r"cell 0 is not empty"):
        cells.set_cell(0, 5, (0,))
    with pytest.raises(ValueError, match=r"seq_id 2 .*n_seq_max = 2"):
        cells.set_cell(1, 5, (2,))
    with pytest.raises(ValueError, match=r"at least one seq_id"):
        cells.set_cell(1, 5, ())
    assert cells.used() == 1


def test_snapshot_is_independent():
    cells = filled(3)
    snap = cells.snapshot()
    cells.seq_rm(0, -1, -1)
    cells.set_cell(5, 9, (1,))
    assert snap.used() == 3 and snap.seq_pos_max(0) == 2 and snap.seq_pos_max(1) == -1
    cells.restore(snap)
    assert cells == filled(3) and cells.seq_pos_max(1) == -1
    cells.seq_rm(0, 0, 1)
    assert snap.used() == 3  # restoring copied, it did not alias


def test_seq_pos_tracks_tail_removal_on_a_big_cache():
    cells = KVCells(32768, 4)
    cells.apply_ubatch(list(range(30000)), list(range(30000)), [(0,)] * 30000)
    for p in range(29999, 29000, -1):  # pop the tail one by one, querying each time
        cells.seq_rm(0, p, -1)
        assert cells.seq_pos_max(0) == p - 1
    assert cells.seq_pos_min(0) == 0
