"""create_memory(): the KV memory a model needs (llama_model::create_memory) — a KVCache, or the
iSWA pair for models with sliding-window layers — and the two helpers that let Context and the
forward treat both alike."""
from __future__ import annotations

from typing import TYPE_CHECKING, Union

import torch

from ..model.hparams import HParams
from .iswa import KVCacheISWA
from .kv_cache import KVCache, SlotInfo
from .kv_log import log_kv_size

if TYPE_CHECKING:
    from ..cparams import CParams
    from ..model.graph import UBatchInputs

Memory = Union[KVCache, KVCacheISWA]


def create_memory(hp: HParams, c: "CParams", device: str | torch.device = "cpu", layers: list[int] | None = None) -> Memory:
    """KVCacheISWA when the model has sliding-window layers (n_swa > 0), else one KVCache of
    n_ctx cells.  layers: the tensors of only these layers (a pipeline stage's; the cells'
    bookkeeping is the whole model's all the same).  Logs llama.cpp's creation lines."""
    if hp.n_swa > 0 and any(hp.is_swa(il) for il in range(hp.n_layer)):
        return KVCacheISWA(hp, c.n_ctx_seq, c.n_seq_max, c.kv_unified, c.n_ubatch, c.swa_full,
                           c.type_k, c.type_v, device=device, layers=layers)
    kv = KVCache(hp, c.n_ctx, c.n_seq_max, c.kv_unified, c.type_k, c.type_v, layers=layers, device=device,
                 name="llama_kv_cache")
    log_kv_size(kv)
    return kv


def local_memory(memory) -> Memory:
    """The KVCache / KVCacheISWA itself: a pipeline's stage-0 view (pipeline/memory.py
    BroadcastMemory) wraps it as `local`."""
    return getattr(memory, "local", memory)


def bind_slot_info(inp: "UBatchInputs", memory: Memory, sinfo) -> None:
    """Register the ubatch's slot info for every cache of `memory` in the graph inputs."""
    memory = local_memory(memory)
    if isinstance(memory, KVCacheISWA):
        for cache, si in memory.slot_infos(sinfo):
            inp.sinfo[id(cache)] = si
    else:
        inp.sinfo[id(memory)] = sinfo


def cache_for_layer(memory: Memory, il: int) -> KVCache:
    """The KVCache layer il uses."""
    memory = local_memory(memory)
    return memory.cache_for_layer(il) if isinstance(memory, KVCacheISWA) else memory


def can_reuse_prefix(memory: Memory, s: int, n_tokens: int) -> bool:
    """Can sequence s keep its first n_tokens cached tokens and continue decoding at position
    n_tokens?  A plain cache: iff they are all there.  iSWA: also the window's cells."""
    memory = local_memory(memory)
    if isinstance(memory, KVCacheISWA):
        return memory.can_reuse_prefix(s, n_tokens)
    if n_tokens <= 0:
        return True
    return memory.seq_pos_min(s) == 0 and memory.seq_pos_max(s) >= n_tokens - 1


__all__ = ["Memory", "local_memory", "SlotInfo", "bind_slot_info", "cache_for_layer", "can_reuse_prefix", "create_memory"]
