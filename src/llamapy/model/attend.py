"""The attention step of one layer, shared by every architecture: write the ubatch's K and V
into its cells, then attend over the first n_kv cells of each stream it touches through the
KQ mask (flash: fused SDPA; otherwise the KQ matrix is materialized, as llama.cpp's -fa off)."""
from __future__ import annotations

import torch

from ..memory.kv_cache import KVCache
from .graph import UBatchInputs
from .layers import attention


def attend(inp: UBatchInputs, cache: KVCache, il: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           scale: float, swa: bool = False) -> torch.Tensor:
    """q: [n_tokens, n_head, d_k], k: [n_tokens, n_head_kv, d_k], v: [n_tokens, n_head_kv * d_v]
    -> [n_tokens, n_head * d_v].  swa selects the sliding-window mask."""
    hp = cache.hp
    n_tokens, n_head, d_k = q.shape
    d_v = hp.n_embd_head_v
    cache.store(il, inp.sinfo[id(cache)], k.reshape(n_tokens, -1), v)
    out = torch.empty(n_tokens, n_head * d_v, dtype=q.dtype, device=q.device)
    for rows, st, n_kv, mask in inp.groups(cache, swa):
        kc, vc = cache.view(il, st, n_kv)  # [n_kv, n_embd_k_gqa], [n_kv, n_embd_v_gqa]
        out[rows] = attention(
            q[rows], kc.view(n_kv, hp.n_head_kv, d_k), vc.view(n_kv, hp.n_head_kv, d_v), mask, scale, inp.flash_attn
        )
    return out
