"""The KQ-mask rule of llama.cpp's unified KV cache (llama_kv_cache::set_input_kq_mask),
as a scalar predicate and as a vectorised numpy builder.  No torch: the KV cache turns the
boolean matrix into its additive -inf mask.

A query row (q_seq = the row's seq_id[0], q_pos) sees cell j iff
    the cell is not empty, AND the cell holds q_seq, AND (causal) cell pos <= q_pos,
    AND the cell is not outside the sliding window (is_masked_swa(n_swa, swa_type, cell_pos, q_pos)).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .swa import SwaType, is_masked_swa, is_masked_swa_np

if TYPE_CHECKING:
    from .cells import KVCells


def _check_swa(n_swa: int, swa_type: SwaType | int) -> None:
    if swa_type != SwaType.NONE and n_swa <= 0:
        raise ValueError(f"n_swa ({n_swa}) must be > 0 for swa_type {SwaType(swa_type).name}")


def visible(cells: "KVCells", i_cell: int, q_seq: int, q_pos: int, n_swa: int = 0,
            swa_type: SwaType | int = SwaType.NONE, causal: bool = True) -> bool:
    """Does the query (q_seq, q_pos) attend to cell i_cell?  The scalar rule."""
    _check_swa(n_swa, swa_type)
    if cells.is_empty(i_cell) or not cells.seq_has(i_cell, q_seq):
        return False
    p0 = cells.pos_get(i_cell)
    if causal and p0 > q_pos:
        return False
    return not is_masked_swa(n_swa, swa_type, p0, q_pos)


def kq_mask_np(cells: "KVCells", n_kv: int, q_seq: np.ndarray, q_pos: np.ndarray, n_swa: int = 0,
               swa_type: SwaType | int = SwaType.NONE, causal: bool = True) -> np.ndarray:
    """visible() for every (query row, cell) pair over the first n_kv cells.

    q_seq, q_pos: int[n_tokens].  Returns bool[n_tokens, n_kv], True = attend.
    """
    _check_swa(n_swa, swa_type)
    if not 0 <= n_kv <= cells.size:
        raise ValueError(f"n_kv ({n_kv}) must be in [0, size = {cells.size}]")
    q_seq = np.asarray(q_seq, dtype=np.int64).reshape(-1)  # [n_tokens]
    q_pos = np.asarray(q_pos, dtype=np.int64).reshape(-1)  # [n_tokens]
    if q_seq.shape != q_pos.shape:
        raise ValueError(f"q_seq has {q_seq.size} rows but q_pos has {q_pos.size}")
    pos = cells.pos[:n_kv].astype(np.int64)                 # [n_kv]
    mask = cells.seq[:n_kv][:, q_seq].T & (pos >= 0)[None, :]  # [n_tokens, n_kv]
    if causal:
        mask &= pos[None, :] <= q_pos[:, None]
    if swa_type != SwaType.NONE:
        mask &= ~is_masked_swa_np(n_swa, swa_type, pos[None, :], q_pos[:, None])
    return mask
