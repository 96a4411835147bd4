"""KVCells: the bookkeeping of one KV-cache stream (llama_kv_cells), free of torch.

Each cell holds a position (or is empty), the set of sequences that see it, and an
accumulated position shift (for seq_add's K re-rotation).  Arrays are numpy so that
the KV cache can build its mask from them with vectorised ops.

  pos:   int32[size]          -1 for an empty cell
  seq:   bool[size, n_seq_max] seq[i, s] is True if sequence s sees cell i
  shift: int32[size]          position delta accumulated since the last K-shift

Invariants: a cell is non-empty iff it has at least one sequence; shift[i] == pos[i] minus
the position cell i had when it was written or at the last reset_shift().  `head` is where
the next slot search starts (llama.cpp keeps it beside the cells, as v_heads).
Range arguments follow llama.cpp: p0 < 0 means 0, p1 < 0 means +infinity.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .find_slot import find_slot
from .seq_pos import SeqPos
from .swa import SwaType

_POS_INF = np.iinfo(np.int32).max
# apply_ubatch writes this many rows or more into empty cells at once (_fill); fewer row by row:
# on Zen 3 (one thread) 512 rows 1.28 -> 0.74 ms into a filling cache, 256 0.63 -> 0.49, but
# 128 0.31 -> 0.42 (add_many re-heapifies the sequence's heaps) and one row 5 -> 42 us
FILL_ROWS = 256


def _range(p0: int, p1: int) -> tuple[int, int]:
    return max(p0, 0), (_POS_INF if p1 < 0 else p1)


class KVCells:
    def __init__(self, size: int, n_seq_max: int) -> None:
        if size < 1 or n_seq_max < 1:
            raise ValueError(f"KVCells needs size >= 1 and n_seq_max >= 1 (got {size}, {n_seq_max})")
        self.size = size
        self.n_seq_max = n_seq_max
        self.pos = np.full(size, -1, dtype=np.int32)
        self.seq = np.zeros((size, n_seq_max), dtype=bool)
        self.shift = np.zeros(size, dtype=np.int32)
        self.head = 0
        self._seq_pos = [SeqPos() for _ in range(n_seq_max)]
        self._n_used = 0
        self._has_shift = False

    # --- queries -------------------------------------------------------------------------
    def _check_seq(self, s: int) -> None:
        if not 0 <= s < self.n_seq_max:
            raise ValueError(f"seq_id {s} is outside [0, n_seq_max = {self.n_seq_max}): raise -np/--parallel")

    def used(self) -> int:
        """Number of non-empty cells."""
        return self._n_used

    def used_min(self) -> int:
        """Index of the first non-empty cell (0 when all are empty)."""
        nz = np.flatnonzero(self.pos >= 0)
        return int(nz[0]) if nz.size else 0

    def used_max_p1(self) -> int:
        """1 + index of the last non-empty cell (0 when all are empty)."""
        nz = np.flatnonzero(self.pos >= 0)
        return int(nz[-1]) + 1 if nz.size else 0

    def is_empty(self, i: int) -> bool:
        return bool(self.pos[i] < 0)

    def pos_get(self, i: int) -> int:
        """Position of cell i, -1 if empty."""
        return int(self.pos[i])

    def seq_has(self, i: int, s: int) -> bool:
        return bool(self.seq[i, s])

    def seq_count(self, i: int) -> int:
        return int(self.seq[i].sum())

    def seq_get_all(self, i: int) -> tuple[int, ...]:
        """The sequences that see cell i, ascending."""
        return tuple(int(s) for s in np.flatnonzero(self.seq[i]))

    def seq_pos_min(self, s: int) -> int:
        """Smallest position of sequence s in these cells, -1 if the sequence is absent."""
        self._check_seq(s)
        return self._seq_pos[s].min()

    def seq_pos_max(self, s: int) -> int:
        """Largest position of sequence s, -1 if absent."""
        self._check_seq(s)
        return self._seq_pos[s].max()

    def has_shift(self) -> bool:
        return self._has_shift

    def get_shift(self, i: int) -> int:
        return int(self.shift[i])

    def set_shift(self, i: int, delta: int) -> None:
        """Cell i carries a pending K-shift of delta (a restored cell's: memory/seq_state.py)."""
        self.shift[i] = delta
        self._has_shift = self._has_shift or delta != 0

    def reset_shift(self) -> None:
        """Call after the K-shift was applied to the K tensors."""
        self._has_shift = False
        self.shift[:] = 0

    # --- single-cell mutation -------------------------------------------------------------
    def set_cell(self, i: int, pos: int, seq_ids: Sequence[int]) -> None:
        """Occupy empty cell i with (pos, seq_ids).  Raises if not empty."""
        if not self.is_empty(i):
            raise ValueError(f"cell {i} is not empty (pos {int(self.pos[i])}, seqs {self.seq_get_all(i)})")
        if pos < 0:
            raise ValueError(f"cell {i}: position {pos} < 0")
        sids = tuple(dict.fromkeys(seq_ids))
        if not sids:
            raise ValueError(f"cell {i}: at least one seq_id is needed")
        for s in sids:
            self._check_seq(s)
        self.pos[i] = pos
        self.shift[i] = 0
        for s in sids:
            self.seq[i, s] = True
            self._seq_pos[s].add(pos)
        self._n_used += 1

    def rm(self, i: int) -> None:
        """Empty cell i (all sequences).  Raises if already empty."""
        if self.is_empty(i):
            raise ValueError(f"cell {i} is already empty")
        p = int(self.pos[i])
        for s in np.flatnonzero(self.seq[i]).tolist():
            self._seq_pos[s].remove(p)
        self._empty(np.array([i]))

    def _empty(self, idx: np.ndarray) -> None:
        """Mark cells idx empty; their sequences must already be removed from _seq_pos."""
        self.pos[idx] = -1
        self.seq[idx] = False
        self.shift[idx] = 0
        self._n_used -= int(idx.size)

    def _in_range(self, p0: int, p1: int) -> np.ndarray:
        p0, p1 = _range(p0, p1)
        return (self.pos >= p0) & (self.pos < p1)

    def _lower_head(self, freed: np.ndarray) -> None:
        if freed.size and int(freed[0]) < self.head:
            self.head = int(freed[0])

    # --- sequence operations --------------------------------------------------------------
    def seq_rm(self, s: int, p0: int, p1: int) -> int:
        """Remove sequence s from cells with p0 <= pos < p1 (p0 < 0: 0; p1 < 0: infinity);
        s < 0 means every sequence.  Cells left with no sequence become empty.
        Returns the number of cells freed.  head moves down to the first freed cell."""
        sel = self._in_range(p0, p1)
        if s >= 0:
            self._check_seq(s)
            idx = np.flatnonzero(sel & self.seq[:, s])
            self.seq[idx, s] = False
            self._seq_pos[s].remove_many(self.pos[idx])
            freed = idx[~self.seq[idx].any(axis=1)]
        else:
            freed = np.flatnonzero(sel)
            for t in np.flatnonzero(self.seq[freed].any(axis=0)).tolist():
                self._seq_pos[t].remove_many(self.pos[freed[self.seq[freed, t]]])
        self._empty(freed)
        self._lower_head(freed)
        return int(freed.size)

    def seq_cp(self, s_src: int, s_dst: int, p0: int, p1: int) -> None:
        """Make s_dst see every cell of s_src in [p0, p1) — shared cells, no data copied."""
        self._check_seq(s_src)
        self._check_seq(s_dst)
        if s_src == s_dst:
            return
        idx = np.flatnonzero(self._in_range(p0, p1) & self.seq[:, s_src] & ~self.seq[:, s_dst])
        self.seq[idx, s_dst] = True
        self._seq_pos[s_dst].add_many(self.pos[idx])

    def seq_keep(self, s: int) -> None:
        """Empty every cell not seen by s; drop every other sequence from cells s sees."""
        self._check_seq(s)
        for t in range(self.n_seq_max):
            if t != s:
                self._seq_pos[t].clear()
        keep = self.seq[:, s].copy()
        freed = np.flatnonzero((self.pos >= 0) & ~keep)
        self.seq[:] = False
        self.seq[:, s] = keep
        self._empty(freed)
        self._lower_head(freed)

    def _move(self, idx: np.ndarray, new_pos: np.ndarray) -> np.ndarray:
        """Re-position cells idx to new_pos for all their sequences, accumulating shift;
        cells whose new position is negative are emptied.  Returns the freed cells."""
        if new_pos.size and int(new_pos.max()) > _POS_INF:
            raise ValueError(f"position {int(new_pos.max())} does not fit in int32")
        old = self.pos[idx]
        cols = np.flatnonzero(self.seq[idx].any(axis=0)).tolist()
        for t in cols:
            self._seq_pos[t].remove_many(old[self.seq[idx, t]])
        self.pos[idx] = new_pos
        self.shift[idx] += (new_pos - old).astype(np.int32)
        if idx.size:
            self._has_shift = True
        gone = new_pos < 0
        freed, kept = idx[gone], idx[~gone]
        self._empty(freed)
        for t in cols:
            self._seq_pos[t].add_many(self.pos[kept[self.seq[kept, t]]])
        return freed

    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None:
        """Add delta to positions of s's cells in [p0, p1), accumulating `shift`.
        The cells move for all their sequences (as in llama.cpp); a cell whose position
        becomes negative is emptied.  head goes to the first freed cell, else 0."""
        self._check_seq(s)
        p0, p1 = _range(p0, p1)
        if delta == 0 or p0 == p1:
            return
        idx = np.flatnonzero(self._in_range(p0, p1) & self.seq[:, s])
        freed = self._move(idx, self.pos[idx].astype(np.int64) + delta)
        self.head = int(freed[0]) if freed.size else 0

    def seq_div(self, s: int, p0: int, p1: int, d: int) -> None:
        """Integer-divide positions of s's cells in [p0, p1) by d (d >= 1), accumulating shift.
        shift gets new - old (llama.cpp's pos_div adds old - new, the opposite sign of pos_add;
        here both follow the invariant shift == pos - written pos, which K re-rotation needs)."""
        self._check_seq(s)
        if d < 1:
            raise ValueError(f"seq_div: divisor {d} must be >= 1")
        p0, p1 = _range(p0, p1)
        if d == 1 or p0 == p1:
            return
        idx = np.flatnonzero(self._in_range(p0, p1) & self.seq[:, s])
        self._move(idx, self.pos[idx] // d)

    def clear(self) -> None:
        """llama_kv_cells::reset plus head = 0."""
        self.restore(KVCells(self.size, self.n_seq_max))

    # --- slots ----------------------------------------------------------------------------
    def find_slot(self, n_tokens: int, head: int | None = None, cont: bool = False,
                  n_swa: int = 0, swa_type: SwaType | int = SwaType.NONE) -> list[int] | None:
        """Indices of n_tokens usable cells, searched from `head` (default self.head) and
        wrapping around (llama.cpp find_slot); None if fewer are usable.  Usable: empty, or
        (SWA) held by one sequence and outside its window.  If more than used + 2*n_tokens
        cells lie before head, the search starts at 0.  cont=True asks for n_tokens adjacent
        cells.  Changes nothing."""
        pmax = [sp.max() for sp in self._seq_pos] if swa_type != SwaType.NONE else []
        return find_slot(self.pos, self.seq, self._n_used, pmax, n_tokens,
                         self.head if head is None else head, cont, n_swa, swa_type)

    def apply_ubatch(self, idxs: Sequence[int], pos: Sequence[int], seq_ids: Sequence[Sequence[int]]) -> None:
        """The cell half of llama_kv_cache::apply_ubatch: write row k at cell idxs[k].  A cell
        still held (SWA reuse) is emptied first, and positions of its sequence up to the
        overwritten one are purged so each sequence stays a contiguous range.  head moves to
        idxs[-1] + 1."""
        if not (len(idxs) == len(pos) == len(seq_ids)) or not idxs:
            raise ValueError(f"apply_ubatch: {len(idxs)} cells, {len(pos)} positions, {len(seq_ids)} seq sets")
        for p, sids in zip(pos, seq_ids):  # check first: a bad row must not leave half a ubatch
            if p < 0 or not sids or not all(0 <= s < self.n_seq_max for s in sids):
                raise ValueError(f"apply_ubatch: bad row (pos {p}, seq_ids {tuple(sids)}), n_seq_max = {self.n_seq_max}")
        if len(idxs) >= FILL_ROWS:  # a prompt's rows into empty, distinct cells: at once
            idx = np.asarray(idxs, dtype=np.int64)
            if (self.pos[idx] < 0).all() and np.unique(idx).size == idx.size:
                self._fill(idx, np.asarray(pos, dtype=np.int64), seq_ids)
                self.head = int(idxs[-1]) + 1
                return
        max_rm: dict[int, int] = {}
        for i, p, sids in zip(idxs, pos, seq_ids):
            if not self.is_empty(i):
                for t in self.seq_get_all(i):
                    max_rm[t] = max(max_rm.get(t, -1), self.pos_get(i))
                self.rm(i)
            self.set_cell(i, p, sids)
        for t, p_rm in sorted(max_rm.items()):
            if self.seq_pos_min(t) <= p_rm:
                self.seq_rm(t, self.seq_pos_min(t), p_rm + 1)
        self.head = int(idxs[-1]) + 1

    def _fill(self, idx: np.ndarray, pos: np.ndarray, seq_ids: Sequence[Sequence[int]]) -> None:
        """set_cell(idx[k], pos[k], seq_ids[k]) for every row k, the cells empty and distinct (the
        rows checked by apply_ubatch): numpy writes, and each sequence's positions added at once
        (an empty cell's shift is 0 already: _empty)."""
        self.pos[idx] = pos
        first = seq_ids[0]
        if len(first) == 1 and all(len(sids) == 1 and sids[0] == first[0] for sids in seq_ids):  # one sequence
            by_seq = {first[0]: slice(None)}
        else:
            rows: dict[int, list[int]] = {}
            for k, sids in enumerate(seq_ids):
                for s in dict.fromkeys(sids):
                    rows.setdefault(s, []).append(k)
            by_seq = {s: np.asarray(ks, dtype=np.int64) for s, ks in rows.items()}
        for s, ks in by_seq.items():
            self.seq[idx[ks], s] = True
            self._seq_pos[s].add_many(pos[ks])
        self._n_used += idx.size

    # --- state ----------------------------------------------------------------------------
    def snapshot(self) -> "KVCells":
        """A deep copy, used to undo a decode that failed part-way."""
        snap = KVCells(self.size, self.n_seq_max)
        snap.restore(self)
        return snap

    def restore(self, snap: "KVCells") -> None:
        """Put back the state of `snap` (taken from this object).  The arrays are written in
        place, so views of pos/seq/shift held elsewhere stay valid."""
        if (snap.size, snap.n_seq_max) != (self.size, self.n_seq_max):
            raise ValueError(f"snapshot of {snap.size} cells x {snap.n_seq_max} seqs cannot restore "
                             f"{self.size} cells x {self.n_seq_max} seqs")
        np.copyto(self.pos, snap.pos)
        np.copyto(self.seq, snap.seq)
        np.copyto(self.shift, snap.shift)
        self.head = snap.head
        self._seq_pos = [sp.copy() for sp in snap._seq_pos]
        self._n_used = snap._n_used
        self._has_shift = snap._has_shift

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KVCells):
            return NotImplemented
        return (self.size == other.size and self.n_seq_max == other.n_seq_max and self.head == other.head
                and self._has_shift == other._has_shift and np.array_equal(self.pos, other.pos)
                and np.array_equal(self.seq, other.seq) and np.array_equal(self.shift, other.shift))

    __hash__ = None  # type: ignore[assignment]  # mutable
