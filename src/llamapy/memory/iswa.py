"""KVCacheISWA (llama_kv_cache_iswa): the pair of KV caches of an interleaved sliding-window
model (Gemma 3).  Global layers write to `kv_base`, n_ctx_seq cells per stream; window layers
write to `kv_swa`, only

    size_swa = pad256(min(n_ctx_seq, n_swa * (n_seq_max if unified else 1) + n_ubatch))

cells per stream (n_ctx_seq with swa_full).  A SWA cell whose only sequence has moved n_swa
positions past it is free for reuse (KVCells.find_slot's SWA rule) and is overwritten lazily,
exactly as llama.cpp does; the SWA layers' KQ mask hides cells outside the window.

The object offers the memory API Context and the server use on a plain KVCache (seq_* on both
caches, seq_pos_min/max, prepare/begin_ubatch, has_shift/apply_shift, n_used, sizes), plus
cache_for_layer(il) for the forward and prefix_reuse_range / can_reuse_prefix, which say which
cached prefixes are still usable once the window has moved on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..batch.allocator import UBatch
from ..log import logger
from ..model.hparams import HParams
from .kv_cache import N_PAD, KVCache, SlotInfo
from .estimate import swa_cells
from .kv_log import log_kv_size


@dataclass(frozen=True, slots=True)
class ISWASlotInfo:
    """Where one ubatch goes in each of the two caches."""

    base: SlotInfo
    swa: SlotInfo


class KVCacheISWA:
    def __init__(
        self,
        hp: HParams,
        n_ctx_seq: int,
        n_seq_max: int,
        unified: bool,
        n_ubatch: int,
        swa_full: bool = False,
        type_k: str = "f16",
        type_v: str = "f16",
        device: str | torch.device = "cpu",
        layers: list[int] | None = None,
    ) -> None:
        if hp.n_swa <= 0 or not any(hp.is_swa(il) for il in range(hp.n_layer)):
            raise ValueError(f"{hp.arch}: n_swa = {hp.n_swa} and no sliding-window layer: use a plain KVCache")
        log = logger("llama_kv_cache_iswa")
        n_stream = 1 if unified else n_seq_max
        size_swa = swa_cells(n_ctx_seq, hp.n_swa, n_seq_max, unified, n_ubatch, swa_full)
        if swa_full:
            log.warning("using full-size SWA cache (ref: https://github.com/ggml-org/llama.cpp/pull/13194#issuecomment-2868343055)")
        self.swa_full = swa_full
        self.n_swa = hp.n_swa
        held = range(hp.n_layer) if layers is None else layers  # a pipeline stage holds some
        base_layers = [il for il in held if not hp.is_swa(il)]
        swa_layers = [il for il in held if hp.is_swa(il)]
        log.info(f"creating non-SWA KV cache, size = {n_ctx_seq} cells")
        self.kv_base = KVCache(hp, n_ctx_seq * n_stream, n_seq_max, unified, type_k, type_v,
                               layers=base_layers, n_swa=0, device=device, name="llama_kv_cache (non-SWA)")
        log_kv_size(self.kv_base)
        log.info(f"creating     SWA KV cache, size = {size_swa} cells")
        self.kv_swa = KVCache(hp, size_swa * n_stream, n_seq_max, unified, type_k, type_v,
                              layers=swa_layers, n_swa=hp.n_swa, device=device, name="llama_kv_cache (SWA)")
        log_kv_size(self.kv_swa)
        self._by_layer = {il: self.kv_base for il in base_layers} | {il: self.kv_swa for il in swa_layers}

    # --- shape -------------------------------------------------------------------------------
    def cache_for_layer(self, il: int) -> KVCache:
        """The cache layer il reads and writes (the SWA one for window layers)."""
        return self._by_layer[il]

    @property
    def caches(self) -> tuple[KVCache, KVCache]:
        return self.kv_base, self.kv_swa

    @property
    def n_seq_max(self) -> int:
        return self.kv_base.n_seq_max

    @property
    def unified(self) -> bool:
        return self.kv_base.unified

    @property
    def n_stream(self) -> int:
        return self.kv_base.n_stream

    @property
    def size(self) -> int:
        """Cells per stream of the non-SWA cache (the context a sequence can hold)."""
        return self.kv_base.size

    @property
    def kv_size(self) -> int:
        return self.kv_base.kv_size

    @property
    def cells(self):
        """The non-SWA cache's cells (one KVCells per stream): every token in context."""
        return self.kv_base.cells

    def n_kv(self, stream: int) -> int:
        return self.kv_base.n_kv(stream)

    def n_used(self) -> int:
        """Tokens held in context: the non-SWA cache's used cells (the SWA cache holds a subset)."""
        return self.kv_base.n_used()

    def size_k_bytes(self) -> int:
        return self.kv_base.size_k_bytes() + self.kv_swa.size_k_bytes()

    def size_v_bytes(self) -> int:
        return self.kv_base.size_v_bytes() + self.kv_swa.size_v_bytes()

    # --- llama_memory API: applied to both caches ------------------------------------------------
    def seq_rm(self, s: int, p0: int = -1, p1: int = -1) -> bool:
        a = self.kv_base.seq_rm(s, p0, p1)
        b = self.kv_swa.seq_rm(s, p0, p1)
        return a and b

    def seq_cp(self, s_src: int, s_dst: int, p0: int = -1, p1: int = -1) -> None:
        for kv in self.caches:
            kv.seq_cp(s_src, s_dst, p0, p1)

    def seq_keep(self, s: int) -> None:
        for kv in self.caches:
            kv.seq_keep(s)

    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None:
        """Shift positions in both caches.  Exact only when can_shift (see there)."""
        for kv in self.caches:
            kv.seq_add(s, p0, p1, delta)

    def seq_div(self, s: int, p0: int, p1: int, d: int) -> None:
        for kv in self.caches:
            kv.seq_div(s, p0, p1, d)

    def seq_pos_min(self, s: int) -> int:
        """From the SWA cache, as llama.cpp: the base cache holds a superset of its positions."""
        return self.kv_swa.seq_pos_min(s)

    def seq_pos_max(self, s: int) -> int:
        return self.kv_swa.seq_pos_max(s)

    def clear(self, data: bool = False) -> None:
        for kv in self.caches:
            kv.clear(data)

    @property
    def can_shift(self) -> bool:
        """llama_kv_cache_iswa::get_can_shift: a context shift (seq_rm + seq_add) is exact only
        when the SWA cache is as large as the base one (--swa-full): otherwise cells the window
        left behind may already be overwritten, and positions moved back into the window would
        find them missing."""
        return self.kv_swa.size == self.kv_base.size

    # --- prefix reuse under a window ------------------------------------------------------------
    def prefix_reuse_range(self, s: int) -> tuple[int, int]:
        """(lo, hi): sequence s can keep its first n cached tokens (seq_rm(s, n, -1)) and decode
        from position n for every n in [lo, hi], and for n = 0.  hi = seq_pos_max + 1.  The query
        at position n reads positions > n - n_swa in the SWA layers, so they must still be cached:
        lo = seq_pos_min(SWA) + n_swa - 1, or 1 when the SWA cache still holds position 0.
        Empty (lo > hi) when nothing can be reused.  Assumes s's positions start at 0 in the base
        cache (prompt caching) and are contiguous in the SWA cache (llama.cpp's invariant)."""
        pmax = self.kv_base.seq_pos_max(s)
        if pmax < 0 or self.kv_swa.seq_pos_max(s) != pmax or self.kv_base.seq_pos_min(s) != 0:
            return 1, 0
        pmin_swa = self.kv_swa.seq_pos_min(s)
        lo = 1 if pmin_swa == 0 else pmin_swa + self.n_swa - 1
        return lo, pmax + 1

    def can_reuse_prefix(self, s: int, n_tokens: int) -> bool:
        """Can s keep its first n_tokens cached tokens and continue at position n_tokens?
        False means the caller must seq_rm(s, -1, -1) and recompute from position 0."""
        if n_tokens <= 0:
            return True
        lo, hi = self.prefix_reuse_range(s)
        return lo <= n_tokens <= hi

    # --- ubatches ---------------------------------------------------------------------------------
    def prepare(self, ubatches: list[UBatch]) -> list[ISWASlotInfo]:
        """Cells for every ubatch in both caches; raises KVCacheFullError with both unchanged."""
        base = self.kv_base.prepare(ubatches)
        swa = self.kv_swa.prepare(ubatches)
        return [ISWASlotInfo(b, w) for b, w in zip(base, swa)]

    def begin_ubatch(self, ub: UBatch, sinfo: ISWASlotInfo) -> None:
        self.kv_base.begin_ubatch(ub, sinfo.base)
        self.kv_swa.begin_ubatch(ub, sinfo.swa)

    def slot_infos(self, sinfo: ISWASlotInfo) -> list[tuple[KVCache, SlotInfo]]:
        """(cache, its slot info) pairs for the graph inputs of one ubatch."""
        return [(self.kv_base, sinfo.base), (self.kv_swa, sinfo.swa)]

    def has_shift(self) -> bool:
        return self.kv_base.has_shift() or self.kv_swa.has_shift()

    def apply_shift(self, rotate: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        """rotate(il, k, delta) with global layer indices; each cache rotates its own layers."""
        for kv in self.caches:
            if kv.has_shift():
                kv.apply_shift(rotate)
