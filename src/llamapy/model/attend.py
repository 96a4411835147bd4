"""The attention step of one layer, shared by every architecture: write the ubatch's K and V
into its cells, then attend per stream group (model/graph.py AttnGroup): over the first n_kv
cells through the KQ mask, or over the gathered cells each sequence can see (the same mask,
compressed).  Flash: the CPU kernels -- few rows over an f16 cache or one in ggml's blocks of 32
(q8_0, q4_0, q4_1, q5_0, q5_1): one softmax pass over the cells the mask lets each row see; many
rows over an f16 cache: tiles of 32 query vectors (16 below AVX-512, and there up to 4 tiles a
task), each K and V row widened once for all of them, kernels/c/attn_tiles.c -- else fused SDPA; otherwise the KQ matrix is materialized, as llama.cpp's -fa off.  A cache in host memory under a CUDA model (-nkvo)
gets q, k, v copied to it, attention runs there, and the output is copied back: llama.cpp
runs the KQ and KQV ops of -nkvo on the CPU the same way."""
from __future__ import annotations

import torch

from ..memory.kv_cache import KVCache
from .graph import UBatchInputs
from ..kernels import ops as kops
from ..kernels.ops import fast_lib, row_lib
from ..kernels.types import c_kv_types, tile_attention
from .layers import attention, attention_gathered


def attend(inp: UBatchInputs, cache: KVCache, il: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           scale: float, swa: bool = False, softcap: float = 0.0, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """q: [n_tokens, n_head, d_k], k: [n_tokens, n_head_kv, d_k], v: [n_tokens, n_head_kv * d_v]
    -> [n_tokens, n_head * d_v].  swa selects the sliding-window mask.  softcap > 0 (Gemma 2):
    KQ soft-capped before the mask, which only the materialized KQ does (no C kernel, no SDPA);
    sinks [n_head] (gpt-oss): one more logit per head in the softmax, which the few-row C kernel
    (kernels/c/attn_merge.c lp_attn_merge / lp_attn_sink_scale) and PyTorch's CPU flash kernel also take,
    not the tiles."""
    if q.device != cache.device:  # -nkvo: attention where the cache is
        return attend(inp, cache, il, q.to(cache.device), k.to(cache.device), v.to(cache.device), scale, swa,
                      softcap, None if sinks is None else sinks.to(cache.device)).to(q.device)
    hp = cache.hp
    n_tokens, n_head, d_k = q.shape
    d_v = hp.n_embd_head_v
    cache.store(il, inp.store_plan(cache), k.reshape(n_tokens, -1), v)
    plain = not softcap and sinks is None  # what the C kernels and SDPA compute
    c_types = c_kv_types(cache.type_k.name, cache.type_v.name, d_k, d_v) if inp.flash_attn and not softcap else None
    lib = fast_lib(q) if c_types is not None else None
    tiles = (row_lib(q) if lib is None and plain and tile_attention(
        n_tokens, inp.flash_attn, cache.type_k.name, cache.type_v.name, d_k, d_v, n_head, hp.n_head_kv) else None)
    groups = inp.groups(cache, swa, gather=lib is None and tiles is None, cells=lib is not None)
    out = None
    for g in groups:
        if lib is not None:  # few rows over an f16 or block cache: the C kernel reads only visible cells
            qr = q if len(groups) == 1 else q.index_select(0, g.rows)
            o = kops.attn_kv(lib, qr, cache.k[il][g.stream], cache.v[il][g.stream], c_types, g.n_kv, hp.n_head_kv, d_v,
                             g.mask, scale, g.visible, sinks)
        elif tiles is not None:  # many rows over an f16 cache: the kernel's tiles of 16-32 query vectors
            qr = q if len(groups) == 1 else q.index_select(0, g.rows)
            o = kops.attn_tiles_f16(tiles, qr, cache.k[il][g.stream], cache.v[il][g.stream], g.n_kv, hp.n_head_kv,
                                    g.mask, scale)
        elif g.mask is None:
            kc, vc = cache.gather(il, g.stream, g.cells)  # [S * c_max, n_embd_{k,v}_gqa]
            o = attention_gathered(q.index_select(0, g.q_index), kc, vc, g.bias, g.take, hp.n_head_kv, scale, inp.flash_attn,
                                   softcap, sinks)
        else:
            kc, vc = cache.view(il, g.stream, g.n_kv)  # [n_kv, n_embd_k_gqa], [n_kv, n_embd_v_gqa]
            qr = q if len(groups) == 1 else q.index_select(0, g.rows)
            o = attention(qr, kc.view(g.n_kv, hp.n_head_kv, d_k), vc.view(g.n_kv, hp.n_head_kv, d_v), g.mask, scale,
                          inp.flash_attn, softcap, sinks)
        if len(groups) == 1:
            return o
        if out is None:
            out = torch.empty(n_tokens, n_head * d_v, dtype=q.dtype, device=q.device)
        out[g.rows] = o
    return out
