"""Slot search over one stream's cells (llama_kv_cache::find_slot), on the numpy arrays of
KVCells.  Pure: it reads the cells and returns cell indices, changing nothing."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .swa import SwaType, is_masked_swa_np


def usable_cells(pos: np.ndarray, seq: np.ndarray, seq_pos_max: Sequence[int],
                 n_swa: int, swa_type: SwaType | int) -> np.ndarray:
    """bool[size]: the cell is empty, or (SWA) held by exactly one sequence t and masked for
    t's next query (is_masked_swa(n_swa, swa_type, cell pos, seq_pos_max[t] + 1))."""
    usable = pos < 0  # [size]
    if swa_type != SwaType.NONE:
        idx = np.flatnonzero((seq.sum(axis=1) == 1) & ~usable)
        owner = seq[idx].argmax(axis=1)
        pmax = np.asarray(seq_pos_max, dtype=np.int64)
        usable[idx] = is_masked_swa_np(n_swa, swa_type, pos[idx], pmax[owner] + 1)
    return usable


def find_slot(pos: np.ndarray, seq: np.ndarray, n_used: int, seq_pos_max: Sequence[int], n_tokens: int,
              head: int, cont: bool = False, n_swa: int = 0,
              swa_type: SwaType | int = SwaType.NONE) -> list[int] | None:
    """The first n_tokens usable cells in the order head, head+1, ..., size-1, 0, ..., head-1
    (cont=False), or the first run of n_tokens adjacent usable cells met by llama.cpp's
    windowed scan (cont=True); None when there are not enough.  When head > n_used +
    2*n_tokens the scan starts at 0 instead (better to fill the start of the cache)."""
    size = int(pos.shape[0])
    if n_tokens < 1 or n_tokens > size:
        return None
    head_cur = 0 if head > n_used + 2 * n_tokens else min(max(head, 0), size)
    if head_cur + n_tokens <= size and bool((pos[head_cur:head_cur + n_tokens] < 0).all()):
        return list(range(head_cur, head_cur + n_tokens))  # empty cells from head: first in either order
    usable = usable_cells(pos, seq, seq_pos_max, n_swa, swa_type)
    if not cont:
        order = np.roll(np.arange(size), -head_cur)
        found = order[usable[order]][:n_tokens]
        return found.tolist() if found.size == n_tokens else None
    n_tested = 0
    while n_tested < size:
        if head_cur + n_tokens > size:
            n_tested += size - head_cur
            head_cur = 0
            continue
        window = usable[head_cur:head_cur + n_tokens]
        if window.all():
            return list(range(head_cur, head_cur + n_tokens))
        skip = int(np.argmin(window)) + 1  # past the first unusable cell of the window
        n_tested += skip
        head_cur += skip
    return None
