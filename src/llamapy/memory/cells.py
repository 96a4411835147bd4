"""KVCells: the bookkeeping of one KV-cache stream (llama_kv_cells), free of torch.

Each cell holds a position (or is empty), the set of sequences that see it, and an
accumulated position shift (for seq_add's K re-rotation).  Arrays are numpy so that
the KV cache can build its mask from them with vectorised ops.

  pos:   int32[size]          -1 for an empty cell
  seq:   bool[size, n_seq_max] seq[i, s] is True if sequence s sees cell i
  shift: int32[size]          position delta accumulated since the last K-shift
"""
from __future__ import annotations

import numpy as np


class KVCells:
    def __init__(self, size: int, n_seq_max: int) -> None:
        raise NotImplementedError

    # --- queries -------------------------------------------------------------------------
    size: int
    n_seq_max: int
    pos: np.ndarray
    seq: np.ndarray
    shift: np.ndarray

    def used(self) -> int:
        """Number of non-empty cells."""
        raise NotImplementedError

    def used_max_p1(self) -> int:
        """1 + index of the last non-empty cell (0 when all are empty)."""
        raise NotImplementedError

    def is_empty(self, i: int) -> bool: ...
    def pos_get(self, i: int) -> int: ...
    def seq_has(self, i: int, s: int) -> bool: ...
    def seq_count(self, i: int) -> int: ...

    def seq_pos_min(self, s: int) -> int:
        """Smallest position of sequence s in these cells, -1 if the sequence is absent."""
        raise NotImplementedError

    def seq_pos_max(self, s: int) -> int:
        """Largest position of sequence s, -1 if absent."""
        raise NotImplementedError

    def has_shift(self) -> bool: ...
    def reset_shift(self) -> None: ...

    # --- mutation ------------------------------------------------------------------------
    def set_cell(self, i: int, pos: int, seq_ids: tuple[int, ...]) -> None:
        """Occupy empty cell i with (pos, seq_ids).  Raises if not empty."""
        raise NotImplementedError

    def rm(self, i: int) -> None:
        """Empty cell i (all sequences)."""
        raise NotImplementedError

    def seq_rm(self, s: int, p0: int, p1: int) -> int:
        """Remove sequence s from cells with p0 <= pos < p1 (p0 < 0: 0; p1 < 0: infinity);
        s < 0 means every sequence.  Cells left with no sequence become empty.
        Returns the number of cells freed."""
        raise NotImplementedError

    def seq_cp(self, s_src: int, s_dst: int, p0: int, p1: int) -> None:
        """Make s_dst see every cell of s_src in [p0, p1) — shared cells, no data copied."""
        raise NotImplementedError

    def seq_keep(self, s: int) -> None:
        """Empty every cell not seen by s; drop every other sequence from cells s sees."""
        raise NotImplementedError

    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None:
        """Add delta to positions of s's cells in [p0, p1), accumulating `shift`.
        Only cells seen by s alone are legal to shift in llama.cpp (they are shifted for all
        their sequences); a cell whose position becomes negative is emptied."""
        raise NotImplementedError

    def seq_div(self, s: int, p0: int, p1: int, d: int) -> None:
        """Integer-divide positions of s's cells in [p0, p1) by d (d > 1), accumulating shift."""
        raise NotImplementedError

    def clear(self) -> None: ...

    def find_slot(self, n_tokens: int, head: int = 0) -> list[int] | None:
        """Indices of n_tokens empty cells, searched from `head` and wrapping around
        (llama.cpp find_slot with cont=false); None if fewer than n_tokens are empty."""
        raise NotImplementedError

    def snapshot(self) -> "KVCells":
        """A deep copy, used to undo a decode that failed part-way."""
        raise NotImplementedError

    def restore(self, snap: "KVCells") -> None:
        """Put back the state of `snap` (taken from this object)."""
        raise NotImplementedError
