"""Attention paths against a float64 reference: the dense mask over n_kv cells (fused SDPA or,
-fa off, the whole KQ) and the gathered form (model/graph.py compact_mask: each sequence's
visible cells only).  Random multi-sequence masks, causal and windowed, with empty cells."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from llamapy.model.graph import compact_mask
from llamapy.model.layers import attention, attention_gathered

N_HEAD, N_HEAD_KV, D = 6, 2, 8


def _case(seed: int, n: int, n_kv: int, n_seq: int, window: int = 0):
    """Queries of n_seq sequences against cells holding random (seq, pos), ~1/8 empty."""
    rng = np.random.default_rng(seed)
    cell_seq = rng.integers(0, n_seq, n_kv)
    cell_pos = rng.integers(0, 64, n_kv)
    empty = rng.random(n_kv) < 0.125
    q_seq = rng.integers(0, n_seq, n)
    q_pos = rng.integers(32, 64, n)
    vis = (cell_seq[None] == q_seq[:, None]) & (cell_pos[None] <= q_pos[:, None]) & ~empty[None]
    if window:
        vis &= q_pos[:, None] - cell_pos[None] < window
    vis[np.arange(n), rng.integers(0, n_kv, n)] = True  # every query sees at least one cell
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, N_HEAD, D, generator=g)
    k = torch.randn(n_kv, N_HEAD_KV, D, generator=g)
    v = torch.randn(n_kv, N_HEAD_KV, D, generator=g)
    return vis, q_seq, q, k, v


def _reference(vis, q, k, v, scale):
    r = N_HEAD // N_HEAD_KV
    kk, vv = k.double().repeat_interleave(r, 1), v.double().repeat_interleave(r, 1)
    s = torch.einsum("thd,khd->htk", q.double(), kk) * scale
    s = s.masked_fill(~torch.from_numpy(vis)[None], float("-inf"))
    return torch.einsum("htk,khd->thd", s.softmax(-1), vv).reshape(q.shape[0], -1)


@pytest.mark.parametrize("flash", [True, False], ids=["fa-on", "fa-off"])
@pytest.mark.parametrize("seed,n,n_kv,n_seq,window", [(0, 16, 256, 16, 0), (1, 12, 256, 3, 0), (2, 5, 256, 2, 16),
                                                      (3, 1, 256, 1, 4), (4, 9, 512, 4, 8)])
def test_gathered_and_dense_equal_reference(flash, seed, n, n_kv, n_seq, window):
    vis, q_seq, q, k, v = _case(seed, n, n_kv, n_seq, window)
    ref = _reference(vis, q, k, v, 0.3)
    mask = torch.zeros(n, n_kv).masked_fill_(torch.from_numpy(~vis), float("-inf"))
    torch.testing.assert_close(attention(q, k, v, mask, 0.3, flash).double(), ref, atol=1e-5, rtol=0)
    c = compact_mask(vis, q_seq, N_HEAD, 1 << 22)
    assert c is not None  # each sequence sees a small share of the cells
    cells, q_index, take, bias = (torch.from_numpy(a) for a in c)
    S, r_max, c_max = bias.shape
    assert S == len(np.unique(q_seq)) and S * c_max <= n_kv
    kf, vf = k.reshape(n_kv, -1), v.reshape(n_kv, -1)
    out = attention_gathered(q[q_index], kf[cells], vf[cells], bias, take, N_HEAD_KV, 0.3, flash)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=0)


def test_compact_mask_declines_when_it_does_not_pay():
    n, n_kv = 64, 256
    causal = np.tril(np.ones((n, n_kv), dtype=bool), k=100)  # one sequence sees most cells
    assert compact_mask(causal, np.zeros(n, dtype=np.int64), N_HEAD, 1 << 22) is None
    vis, q_seq, *_ = _case(5, 16, 256, 16)
    assert compact_mask(vis, q_seq, N_HEAD, 64) is None  # scores over the byte budget


@pytest.mark.parametrize("window", [0, 40], ids=["causal", "window-40"])
def test_flash_blocks_read_only_visible_cells(window):
    """A prompt of more rows than FLASH_Q_BLOCK: SDPA runs per block of rows over the cells
    from the first to the last its rows see (a causal mask's later blocks read more, a window's
    skip the early cells).  Two sequences' prompts interleaved in the cells, 64 cells already
    held, ~1/8 of them empty: the same as the float64 reference."""
    from llamapy.model.layers import FLASH_Q_BLOCK

    n, n_kv, held = 2 * FLASH_Q_BLOCK + 44, 2 * FLASH_Q_BLOCK + 108, 64
    rng = np.random.default_rng(7)
    cell_seq = np.arange(n_kv) % 2
    cell_pos = np.concatenate([np.arange(held) // 2, held // 2 + np.arange(n_kv - held) // 2])
    empty = rng.random(n_kv) < 0.125
    rows = np.arange(held, held + n)  # the ubatch's own cells
    empty[rows] = False
    vis = (cell_seq[None] == cell_seq[rows][:, None]) & (cell_pos[None] <= cell_pos[rows][:, None]) & ~empty[None]
    if window:
        vis &= cell_pos[rows][:, None] - cell_pos[None] < window
    g = torch.Generator().manual_seed(7)
    q = torch.randn(n, N_HEAD, D, generator=g)
    k = torch.randn(n_kv, N_HEAD_KV, D, generator=g)
    v = torch.randn(n_kv, N_HEAD_KV, D, generator=g)
    mask = torch.zeros(n, n_kv).masked_fill_(torch.from_numpy(~vis), float("-inf"))
    ref = _reference(vis, q, k, v, 0.3)
    torch.testing.assert_close(attention(q, k, v, mask, 0.3, True).double(), ref, atol=1e-5, rtol=0)
