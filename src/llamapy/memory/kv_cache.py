"""KVCache (llama_kv_cache): K and V tensors for a set of layers, the cell bookkeeping of each
stream, slot search for ubatches, the llama_memory seq_* API, n_kv padding and the KQ mask.

Streams: a unified cache is one stream of kv_size cells shared by every sequence; otherwise
each of the n_seq_max sequences owns a stream of kv_size / n_seq_max cells (llama.cpp's
kv_unified = false).  Tensors per layer:
  k[il]: [n_stream, size, row_k]   row_k = n_embd_k_gqa (or its block bytes for q-types)
  v[il]: [n_stream, size, row_v]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..batch.allocator import UBatch
from ..model.hparams import HParams
from .cells import KVCells
from .kv_types import KVType
from .mask_rule import SwaType, kq_mask_np

N_PAD = 256  # llama_kv_cache::get_n_kv(): the padding quantum of n_kv


class KVCacheFullError(RuntimeError):
    """No room for a ubatch: the cache is unchanged; the message says how full it is."""


def stream_rows(stream: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(stream, row indices) for each stream in `stream` [n_tokens], in stream order; one
    stream (a decode step, a unified cache) without a sort."""
    if stream.size and (stream == stream[0]).all():
        return [(int(stream[0]), np.arange(stream.size))]
    return [(int(s), np.nonzero(stream == s)[0]) for s in np.unique(stream)]


@dataclass(frozen=True, slots=True)
class SlotInfo:
    """Where each row of one ubatch goes (llama.cpp slot_info).  [n_tokens] each."""

    stream: np.ndarray
    idxs: np.ndarray

    def groups(self) -> list[tuple[int, np.ndarray]]:
        """(stream, row indices) for each stream the ubatch touches, in stream order."""
        return stream_rows(self.stream)


class KVCache:
    def __init__(
        self,
        hp: HParams,
        kv_size: int,
        n_seq_max: int,
        unified: bool,
        type_k: str = "f16",
        type_v: str = "f16",
        layers: list[int] | None = None,
        n_swa: int = 0,
        device: str | torch.device = "cpu",
        name: str = "",
    ) -> None:
        self.hp = hp
        self.layers = list(range(hp.n_layer)) if layers is None else list(layers)
        self.n_seq_max = n_seq_max
        self.unified = unified
        self.n_stream = 1 if unified else n_seq_max
        if kv_size % self.n_stream:
            raise ValueError(f"kv_size ({kv_size}) is not divisible by the number of streams ({self.n_stream})")
        self.size = kv_size // self.n_stream  # cells per stream
        self.n_swa = n_swa
        self.swa_type = SwaType.STANDARD if n_swa > 0 else SwaType.NONE
        self.name = name
        self.type_k, self.type_v = KVType(type_k), KVType(type_v)
        self.device = torch.device(device)
        self.cells = [KVCells(self.size, n_seq_max) for _ in range(self.n_stream)]
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        for il in self.layers:
            wk, wv = hp.n_embd_k_gqa(il), hp.n_embd_v_gqa(il)
            self.k[il] = torch.zeros(self.n_stream, self.size, self.type_k.row_width(wk), dtype=self.type_k.torch_dtype, device=self.device)
            self.v[il] = torch.zeros(self.n_stream, self.size, self.type_v.row_width(wv), dtype=self.type_v.torch_dtype, device=self.device)

    # --- sizes -----------------------------------------------------------------------------
    @property
    def kv_size(self) -> int:
        return self.size * self.n_stream

    def size_k_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k.values())

    def size_v_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.v.values())

    def seq_to_stream(self, s: int) -> int:
        return 0 if self.unified else s

    def n_kv(self, stream: int) -> int:
        """Cells attention looks at: used range padded to 256, at least 256, at most size."""
        used = self.cells[stream].used_max_p1()
        return min(self.size, max(N_PAD, -(-used // N_PAD) * N_PAD))

    def n_used(self) -> int:
        return sum(c.used() for c in self.cells)

    # --- llama_memory API --------------------------------------------------------------------
    def _streams_of(self, s: int) -> list[int]:
        return list(range(self.n_stream)) if s < 0 else [self.seq_to_stream(s)]

    def seq_rm(self, s: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove s's cells in [p0, p1) (negative: open end); s < 0: every sequence."""
        for st in self._streams_of(s):
            self.cells[st].seq_rm(s, p0, p1)
        return True

    def seq_cp(self, s_src: int, s_dst: int, p0: int = -1, p1: int = -1) -> None:
        """s_dst sees s_src's cells in [p0, p1).  Same stream: cells are shared, nothing copied.
        Different streams (non-unified): the whole source stream is copied, as llama.cpp does."""
        st_src, st_dst = self.seq_to_stream(s_src), self.seq_to_stream(s_dst)
        if st_src == st_dst:
            self.cells[st_src].seq_cp(s_src, s_dst, p0, p1)
            return
        src, dst = self.cells[st_src], self.cells[st_dst]
        dst.clear()
        for i in np.nonzero(src.seq[:, s_src])[0]:
            p = int(src.pos[i])
            if (p0 < 0 or p >= p0) and (p1 < 0 or p < p1):
                dst.set_cell(int(i), p, (s_dst,))
        for il in self.layers:
            self.k[il][st_dst].copy_(self.k[il][st_src])
            self.v[il][st_dst].copy_(self.v[il][st_src])

    def seq_keep(self, s: int) -> None:
        for st in range(self.n_stream):
            self.cells[st].seq_keep(s)

    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None:
        """Shift s's positions in [p0, p1) by delta; K is re-rotated at the next decode."""
        if delta != 0:
            self.cells[self.seq_to_stream(s)].seq_add(s, p0, p1, delta)

    def seq_div(self, s: int, p0: int, p1: int, d: int) -> None:
        if d != 1:
            self.cells[self.seq_to_stream(s)].seq_div(s, p0, p1, d)

    def seq_pos_min(self, s: int) -> int:
        return self.cells[self.seq_to_stream(s)].seq_pos_min(s)

    def seq_pos_max(self, s: int) -> int:
        return self.cells[self.seq_to_stream(s)].seq_pos_max(s)

    def clear(self, data: bool = False) -> None:
        for st in range(self.n_stream):
            self.cells[st].clear()
        if data:
            for il in self.layers:
                self.k[il].zero_()
                self.v[il].zero_()

    # --- slots --------------------------------------------------------------------------------
    def _find_slot(self, ub: UBatch) -> SlotInfo:
        """Cells for every row of a ubatch, per stream; on a SWA cache, cells every sequence
        has left behind its window count as free (llama.cpp find_slot)."""
        streams = np.array([self.seq_to_stream(s[0]) for s in ub.seq_id], dtype=np.int64)
        idxs = np.zeros(ub.n_tokens, dtype=np.int64)
        for st, rows in stream_rows(streams):
            cells = self.cells[int(st)]
            found = cells.find_slot(len(rows), n_swa=self.n_swa, swa_type=self.swa_type)
            if found is None:
                where = "the cache" if self.unified else f"stream {int(st)} (sequence {ub.seq_id[rows[0]][0]})"
                raise KVCacheFullError(
                    f"{self.name or 'KV cache'} full: a ubatch needs {len(rows)} cells but {where} has "
                    f"{cells.size - cells.used()} of {cells.size} free; raise -c/--ctx-size"
                    + ("" if self.unified else " or use --kv-unified")
                    + ", or free sequences with seq_rm"
                )
            idxs[rows] = found
        return SlotInfo(streams, idxs)

    def apply_ubatch(self, sinfo: SlotInfo, ub: UBatch) -> None:
        """Record the ubatch's (pos, seq_ids) in the cells chosen by _find_slot."""
        for st, rows in sinfo.groups():
            self.cells[st].apply_ubatch(sinfo.idxs[rows].tolist(), [ub.pos[r] for r in rows], [ub.seq_id[r] for r in rows])

    def prepare(self, ubatches: list[UBatch]) -> list[SlotInfo]:
        """Find cells for every ubatch of a decode call by simulating them, then undo the
        simulation.  Raises KVCacheFullError before anything changes if one does not fit.
        Only the streams the ubatches write are copied (one of -np 8 for a single stream); a
        single ubatch (a decode step) needs no simulation: its search changes nothing."""
        if len(ubatches) == 1:
            return [self._find_slot(ubatches[0])]
        touched = sorted({self.seq_to_stream(sids[0]) for ub in ubatches for sids in ub.seq_id})
        snaps = [(st, self.cells[st].snapshot()) for st in touched]
        try:
            out = []
            for ub in ubatches:
                sinfo = self._find_slot(ub)
                self.apply_ubatch(sinfo, ub)
                out.append(sinfo)
            return out
        finally:
            for st, snap in snaps:
                self.cells[st].restore(snap)

    def begin_ubatch(self, ub: UBatch, sinfo: SlotInfo) -> None:
        """Before the forward of one prepared ubatch: occupy its cells."""
        self.apply_ubatch(sinfo, ub)

    # --- graph inputs ---------------------------------------------------------------------------
    def kq_visible(self, ub: UBatch, stream: int, rows: np.ndarray, n_kv: int, swa: bool = False) -> np.ndarray:
        """bool [len(rows), n_kv]: True where the row's query may read the cell (the mask rule)."""
        q_seq = np.array([ub.seq_id[r][0] for r in rows], dtype=np.int64)
        q_pos = np.array([ub.pos[r] for r in rows], dtype=np.int64)
        return kq_mask_np(self.cells[stream], n_kv, q_seq, q_pos, self.n_swa, self.swa_type if swa else SwaType.NONE)

    def kq_mask(self, ub: UBatch, stream: int, rows: np.ndarray, n_kv: int, swa: bool = False,
                out: torch.Tensor | None = None, visible: np.ndarray | None = None) -> torch.Tensor:
        """Additive mask [len(rows), n_kv] float32: 0 where the row's query may read the cell.
        Written into `out` when given (a reused graph input buffer)."""
        if visible is None:
            visible = self.kq_visible(ub, stream, rows, n_kv, swa)
        m = torch.from_numpy(np.where(visible, np.float32(0.0), np.float32(-np.inf)))  # [len(rows), n_kv]
        return m.to(self.device) if out is None else out.copy_(m)

    def store_plan(self, sinfo: SlotInfo) -> list[tuple[int, slice | torch.Tensor, slice | torch.Tensor]]:
        """(stream, cells, ubatch rows) per stream the ubatch writes: slices when the cells are
        one ascending run and the rows are consecutive (the common case: one copy per layer),
        else index tensors.  Computed once per ubatch, used by store() in every layer."""
        plan = []
        for st, rows in sinfo.groups():
            idx = sinfo.idxs[rows]
            n = len(rows)
            if n and idx[-1] - idx[0] == n - 1 and np.all(np.diff(idx) == 1) and rows[-1] - rows[0] == n - 1:
                plan.append((st, slice(int(idx[0]), int(idx[0]) + n), slice(int(rows[0]), int(rows[0]) + n)))
            else:
                plan.append((st, torch.as_tensor(idx, device=self.device), torch.as_tensor(rows, device=self.device)))
        return plan

    def store(self, il: int, plan: list, k: torch.Tensor, v: torch.Tensor) -> None:
        """k: [n_tokens, n_embd_k_gqa], v: [n_tokens, n_embd_v_gqa] float32 -> the ubatch's
        cells, as store_plan() placed them."""
        for st, cells, rows in plan:
            kd, vd = self.k[il][st], self.v[il][st]
            if isinstance(cells, slice):
                kd[cells].copy_(self.type_k.encode(k[rows]) if self.type_k.is_block else k[rows])
                vd[cells].copy_(self.type_v.encode(v[rows]) if self.type_v.is_block else v[rows])
            else:
                kd.index_copy_(0, cells, self.type_k.encode(k.index_select(0, rows)))
                vd.index_copy_(0, cells, self.type_v.encode(v.index_select(0, rows)))

    def view(self, il: int, stream: int, n_kv: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of the first n_kv cells of a stream as float32: [n_kv, n_embd_{k,v}_gqa]."""
        k = self.type_k.decode(self.k[il][stream, :n_kv], self.hp.n_embd_k_gqa(il))
        v = self.type_v.decode(self.v[il][stream, :n_kv], self.hp.n_embd_v_gqa(il))
        return k, v

    def gather(self, il: int, stream: int, cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of the given cells of a stream as float32: [len(cells), n_embd_{k,v}_gqa]."""
        k = self.type_k.decode(self.k[il][stream].index_select(0, cells), self.hp.n_embd_k_gqa(il))
        v = self.type_v.decode(self.v[il][stream].index_select(0, cells), self.hp.n_embd_v_gqa(il))
        return k, v

    # --- K-shift after seq_add / seq_div ------------------------------------------------------------
    def has_shift(self) -> bool:
        return any(c.has_shift() for c in self.cells)

    def apply_shift(self, rotate) -> None:
        """rotate(il, k [n, n_embd_k_gqa] fp32, delta [n] int64) -> k rotated by delta positions."""
        for st, cells in enumerate(self.cells):
            if not cells.has_shift():
                continue
            idx = np.nonzero((cells.shift != 0) & (cells.pos >= 0))[0]
            if len(idx):
                ix = torch.as_tensor(idx, device=self.device)
                delta = torch.as_tensor(cells.shift[idx].astype(np.int64), device=self.device)
                for il in self.layers:
                    w = self.hp.n_embd_k_gqa(il)
                    k = self.type_k.decode(self.k[il][st, ix], w)
                    self.k[il][st, ix] = self.type_k.encode(rotate(il, k, delta))
            cells.reset_shift()
