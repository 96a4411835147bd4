"""The KQ mask rule (llama.cpp set_input_kq_mask): a query row may read a cell only if the
cell is occupied, the cell's sequence set holds the row's first seq_id, the cell is not in
the row's future, and (sliding-window layers) the cell is inside the row's window."""
from __future__ import annotations

import numpy as np

from .cells import KVCells


def kq_mask(cells: KVCells, n_kv: int, q_seq: np.ndarray, q_pos: np.ndarray, n_swa: int = 0) -> np.ndarray:
    """bool [n_rows, n_kv]: True where row r may attend cell j.  q_seq, q_pos: [n_rows]."""
    pos = cells.pos[:n_kv].astype(np.int64)  # [n_kv]
    seen = cells.seq[:n_kv, :].T[q_seq]  # [n_rows, n_kv]: cell j holds row r's sequence
    vis = seen & (pos[None, :] >= 0) & (pos[None, :] <= q_pos[:, None])
    if n_swa > 0:  # LLAMA_SWA_TYPE_STANDARD: masked when p1 - p0 >= n_swa
        vis &= (q_pos[:, None] - pos[None, :]) < n_swa
    return vis
