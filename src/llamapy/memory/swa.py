"""The sliding-window rule of llama.cpp (llama_swa_type, llama_hparams::is_masked_swa): is a key
position outside a query position's attention window?  Scalar and numpy forms; no torch.  The
layer below both the KV cells' slot search (find_slot) and the KQ mask (mask_rule)."""
from __future__ import annotations

from enum import IntEnum

import numpy as np


class SwaType(IntEnum):
    """llama_swa_type."""

    NONE = 0
    STANDARD = 1
    CHUNKED = 2
    SYMMETRIC = 3


def is_masked_swa(n_swa: int, swa_type: SwaType | int, p0: int, p1: int) -> bool:
    """llama_hparams::is_masked_swa: is key position p0 outside the window of query position p1?"""
    if swa_type == SwaType.STANDARD:
        return p1 - p0 >= n_swa
    if swa_type == SwaType.CHUNKED:
        return p0 < (p1 // n_swa) * n_swa
    if swa_type == SwaType.SYMMETRIC:
        half = n_swa // 2
        return not -half <= p1 - p0 <= half
    return False


def is_masked_swa_np(n_swa: int, swa_type: SwaType | int, p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """Element-wise is_masked_swa over broadcast arrays p0 (keys) and p1 (queries)."""
    p0, p1 = np.asarray(p0, dtype=np.int64), np.asarray(p1, dtype=np.int64)
    if swa_type == SwaType.STANDARD:
        return p1 - p0 >= n_swa
    if swa_type == SwaType.CHUNKED:
        return p0 < (p1 // n_swa) * n_swa
    if swa_type == SwaType.SYMMETRIC:
        d = p1 - p0
        return (d < -(n_swa // 2)) | (d > n_swa // 2)
    return np.zeros(np.broadcast_shapes(p0.shape, p1.shape), dtype=bool)
