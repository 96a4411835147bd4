"""One sequence's KV state out of the memory and back (llama_state_seq_get_data /
llama_state_seq_set_data's role): per cache (one KVCache, or the iSWA pair), the sequence's
cells as positions, pending K-shifts and the raw K and V rows of every layer, in the cache's
own storage type.  Restoring puts them into free cells of the sequence's stream and the
sequence sees exactly those positions again, so decoding goes on as if nothing had happened.

The arrays are numpy (K/V rows as their bytes: uint8 [n, row_bytes]) so that a caller can
write them to a file without pickling (server/slot_files.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .kv_cache import KVCache


class SeqStateError(ValueError):
    """A state that cannot go into this memory: the message names the numbers."""


@dataclass(slots=True)
class CacheState:
    """One cache's part: cells sorted by position.  pos, shift: int32 [n]; k[il], v[il]:
    uint8 [n, row bytes] (the cache's storage of each row, as bytes)."""

    type_k: str
    type_v: str
    pos: np.ndarray
    shift: np.ndarray
    k: dict[int, np.ndarray]
    v: dict[int, np.ndarray]

    @property
    def n_cells(self) -> int:
        return int(self.pos.size)

    def n_bytes(self) -> int:
        return sum(a.nbytes for a in (*self.k.values(), *self.v.values())) + self.pos.nbytes + self.shift.nbytes


def caches_of(memory) -> list[KVCache]:
    """The KVCaches of a memory (a KVCache, or the iSWA pair's base and window caches).  A
    pipeline's memory (other processes hold layers) is refused."""
    if hasattr(memory, "local"):
        raise SeqStateError("a pipeline's KV cache spans several processes: sequence state save/restore is not supported there")
    return list(memory.caches) if hasattr(memory, "caches") else [memory]


def _bytes(t: torch.Tensor) -> np.ndarray:
    """A storage tensor [n, w] as its bytes, uint8 [n, w * element size], on the CPU."""
    return t.contiguous().cpu().view(torch.uint8).numpy().copy()


def cache_state_get(kv: KVCache, s: int) -> CacheState:
    st = kv.seq_to_stream(s)
    cells = kv.cells[st]
    idx = np.flatnonzero(cells.seq[:, s] & (cells.pos >= 0))
    idx = idx[np.argsort(cells.pos[idx], kind="stable")]
    ix = torch.as_tensor(idx, dtype=torch.long, device=kv.device)
    return CacheState(kv.type_k.name, kv.type_v.name, cells.pos[idx].copy(), cells.shift[idx].copy(),
                      {il: _bytes(kv.k[il][st].index_select(0, ix)) for il in kv.layers},
                      {il: _bytes(kv.v[il][st].index_select(0, ix)) for il in kv.layers})


def _check(kv: KVCache, cs: CacheState, s: int) -> None:
    """SeqStateError unless cs fits kv: same types, layers and row sizes, enough free cells
    (after s's own cells are removed)."""
    if (cs.type_k, cs.type_v) != (kv.type_k.name, kv.type_v.name):
        raise SeqStateError(f"the state holds K/V of types {cs.type_k}/{cs.type_v}; this cache is {kv.type_k.name}/{kv.type_v.name} (-ctk/-ctv)")
    if sorted(cs.k) != sorted(kv.layers):
        raise SeqStateError(f"the state holds layers {sorted(cs.k)}; this cache has layers {kv.layers} (another model?)")
    for il in kv.layers:
        for name, rows, t in (("K", cs.k[il], kv.k[il]), ("V", cs.v[il], kv.v[il])):
            want = t.shape[-1] * t.element_size()
            if rows.ndim != 2 or rows.shape != (cs.n_cells, want):
                raise SeqStateError(f"layer {il} {name}: the state's rows are {list(rows.shape)}; this cache needs [{cs.n_cells}, {want}] (another model?)")
    cells = kv.cells[kv.seq_to_stream(s)]
    if len(np.unique(cs.pos)) != cs.n_cells or (cs.pos < 0).any() or cs.shift.shape != cs.pos.shape:
        raise SeqStateError("the state's positions are not distinct and non-negative")
    own = int((cells.seq[:, s] & (cells.seq.sum(axis=1) == 1)).sum())
    free = cells.size - cells.used() + own
    if cs.n_cells > free:
        raise SeqStateError(f"the state needs {cs.n_cells} cells; {kv.name or 'the KV cache'} has {free} of {cells.size} free for sequence {s}")


def cache_state_set(kv: KVCache, s: int, cs: CacheState) -> None:
    """Replace s's cells with cs's (checked first: nothing changes on an error)."""
    _check(kv, cs, s)
    st = kv.seq_to_stream(s)
    cells = kv.cells[st]
    kv.seq_rm(s, -1, -1)
    if not cs.n_cells:
        return
    idx = np.flatnonzero(cells.pos < 0)[:cs.n_cells]  # free cells, lowest first
    for i, p, sh in zip(idx.tolist(), cs.pos.tolist(), cs.shift.tolist()):
        cells.set_cell(i, p, (s,))
        cells.set_shift(i, sh)  # a pending K-shift the saved cell carried (none after a decode)
    ix = torch.as_tensor(idx, dtype=torch.long, device=kv.device)
    for il in kv.layers:
        for dst, rows in ((kv.k[il][st], cs.k[il]), (kv.v[il][st], cs.v[il])):
            src = torch.from_numpy(rows).view(dst.dtype).to(kv.device)
            dst.index_copy_(0, ix, src)
    cells.head = int(idx[-1]) + 1 if int(idx[-1]) + 1 < cells.size else 0


def seq_state_size(memory, s: int) -> int:
    """The bytes seq_state_get(memory, s) would hold (llama_state_seq_get_size's role), counted
    from the cells, without copying: per cache, the sequence's cells times every layer's K and
    V row bytes, plus each cell's position and shift (int32)."""
    n = 0
    for kv in caches_of(memory):
        st = kv.seq_to_stream(s)
        cells = kv.cells[st]
        n_cells = int((cells.seq[:, s] & (cells.pos >= 0)).sum())
        row = sum(t[st].shape[-1] * t[st].element_size() for il in kv.layers for t in (kv.k[il], kv.v[il]))
        n += n_cells * (row + cells.pos.itemsize + cells.shift.itemsize)
    return n


def seq_state_get(memory, s: int) -> list[CacheState]:
    """Sequence s's state in every cache of memory."""
    return [cache_state_get(kv, s) for kv in caches_of(memory)]


def seq_state_set(memory, s: int, state: list[CacheState]) -> None:
    """Sequence s's cells become state's; every cache is checked before any changes."""
    caches = caches_of(memory)
    if len(state) != len(caches):
        raise SeqStateError(f"the state holds {len(state)} KV caches; this model's memory has {len(caches)} (another model?)")
    for kv, cs in zip(caches, state):
        _check(kv, cs, s)
    for kv, cs in zip(caches, state):
        cache_state_set(kv, s, cs)
