"""What one ubatch's forward needs besides the weights (llama.cpp's graph inputs), and the
GraphCache that keeps those input buffers per (n_tokens, n_kv) shape, so single-stream
decode reuses them for 256 steps at a time (n_kv is padded to 256 for exactly this)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..batch.allocator import UBatch
from ..kernels.ops import visible_cells_np
from ..memory.kv_cache import KVCache, SlotInfo
from .work import ComputeWork


@dataclass(slots=True)
class AttnGroup:
    """How the rows of one ubatch that live in one stream of one cache attend.

    Dense (mask set): over the first n_kv cells through the additive KQ mask [len(rows), n_kv].
    Gathered (mask None): the mask compressed per sequence: the rows of each of S sequences
    (padded to r_max) against just the cells some of them can see (padded to c_max), with
    bias [S, r_max, c_max] (0 / -inf, the same mask rule) -- so 16 one-token sequences in a
    4096-cell unified cache read 16 x ~256 cells, not 16 x 4096.  q_index [S * r_max] are
    the ubatch rows of each padded slot (pads repeat a real row); take [n] selects the real
    slots, in the order of `rows`."""

    rows: torch.Tensor  # [n] long: ubatch rows in this stream
    stream: int
    n_kv: int
    mask: torch.Tensor | None = None  # dense: [n, n_kv] float32
    cells: torch.Tensor | None = None  # gathered: [S * c_max] long (pads: a visible cell)
    q_index: torch.Tensor | None = None  # gathered: [S * r_max] long
    take: torch.Tensor | None = None  # gathered: [n] long into the S * r_max slots
    bias: torch.Tensor | None = None  # gathered: [S, r_max, c_max] float32
    visible: tuple[torch.Tensor, torch.Tensor] | None = None  # dense, CPU kernel: kernels.ops.visible_cells_np(visible)


GATHER_MAX_FRACTION = 0.5  # gather when the compressed mask has at most this share of the dense one


def compact_mask(visible: np.ndarray, q_seq: np.ndarray, n_head: int, max_score_bytes: int) -> tuple | None:
    """The gathered form of a mask (see AttnGroup), or None when it would not pay: when
    S * r_max * c_max exceeds GATHER_MAX_FRACTION of n * n_kv, when the gathered K/V would be
    larger than the dense view (S * c_max > n_kv), or when its scores would exceed
    max_score_bytes.  visible: bool [n, n_kv]; q_seq: [n] each row's sequence.
    Returns numpy (cells, q_index, take, bias)."""
    n, n_kv = visible.shape
    seqs, inv = np.unique(q_seq, return_inverse=True)
    groups = [np.nonzero(inv == g)[0] for g in range(len(seqs))]
    seen = [np.nonzero(visible[r].any(0))[0] for r in groups]
    S, r_max, c_max = len(groups), max(len(r) for r in groups), max(len(c) for c in seen)
    if (S * r_max * c_max > GATHER_MAX_FRACTION * n * n_kv or S * c_max > n_kv
            or S * n_head * r_max * c_max * 4 > max_score_bytes or c_max == 0):
        return None
    cells = np.zeros((S, c_max), dtype=np.int64)
    q_index = np.zeros((S, r_max), dtype=np.int64)
    bias = np.full((S, r_max, c_max), -np.inf, dtype=np.float32)
    take = np.zeros(n, dtype=np.int64)
    for g, (r, c) in enumerate(zip(groups, seen)):
        cells[g, : len(c)], cells[g, len(c):] = c, c[0]
        q_index[g, : len(r)], q_index[g, len(r):] = r, r[0]
        bias[g, : len(r), : len(c)] = np.where(visible[np.ix_(r, c)], 0.0, -np.inf)
        bias[g, len(r):, 0] = 0.0  # pad rows see one cell: no all -inf row
        take[r] = g * r_max + np.arange(len(r))
    return cells.reshape(-1), q_index.reshape(-1), take, bias


@dataclass(slots=True)
class UBatchInputs:
    """inp_tokens [n_tokens], inp_pos [n_tokens], out_rows [n_outputs], and per KV cache the
    slot info, the store plan and one AttnGroup per stream the ubatch touches."""

    ubatch: UBatch
    tokens: torch.Tensor
    pos: torch.Tensor
    out_rows: torch.Tensor
    flash_attn: bool = True  # fused attention (-fa on/auto) or the explicit KQ matrix (-fa off)
    deterministic: bool = False  # --deterministic: every row as if alone (docs/deterministic.md)
    graphs: "GraphCache | None" = None
    sinfo: dict[int, SlotInfo] = field(default_factory=dict)  # id(cache) -> slot info
    plans: dict[int, list] = field(default_factory=dict)  # id(cache) -> KVCache.store_plan()
    masks: dict[tuple[int, bool, bool, bool], list[AttnGroup]] = field(default_factory=dict)
    logits_out: torch.Tensor | None = None  # [n_outputs, n_vocab] float32 the logits may be written into
    work: ComputeWork | None = None  # the context's kept buffer for products glibc would map afresh (model/work.py)

    def store_plan(self, cache: KVCache) -> list:
        key = id(cache)
        if key not in self.plans:
            self.plans[key] = cache.store_plan(self.sinfo[key])
        return self.plans[key]

    def set_groups(self, cache_id: int, swa: bool, groups: list[AttnGroup]) -> None:
        """`groups` as the answer to every groups() call for this cache and mask kind, whatever
        its gather and cells (CUDA graphs' static inputs: their masks are made beforehand)."""
        for gather in (True, False):
            for cells in (True, False):
                self.masks[(cache_id, swa, gather, cells)] = groups

    def groups(self, cache: KVCache, swa: bool = False, gather: bool = True, cells: bool = True) -> list[AttnGroup]:
        """One AttnGroup for each stream this ubatch touches in `cache`; built once per ubatch.
        gather False: dense masks only (the CPU kernels skip masked cells by themselves), with
        each row's visible cells listed (`visible`, the few-row kernel's) unless cells is False
        (the many-row tiles scan the mask; a 512-row ubatch over 4096 cells would list 2M)."""
        key = (id(cache), swa, gather, cells)
        if key not in self.masks:
            from .layers import FLASH_SCORE_BYTES

            sinfo = self.sinfo[id(cache)]
            out = []
            for st, rows in sinfo.groups():
                n_kv = cache.n_kv(st)
                vis = cache.kq_visible(self.ubatch, st, rows, n_kv, swa)
                q_seq = np.array([self.ubatch.seq_id[r][0] for r in rows], dtype=np.int64)
                c = compact_mask(vis, q_seq, cache.hp.n_head, FLASH_SCORE_BYTES) if gather else None
                rows_t = torch.as_tensor(rows, device=cache.device)
                if c is not None:
                    cells, q_index, take, bias = (torch.from_numpy(a).to(cache.device) for a in c)
                    out.append(AttnGroup(rows_t, st, n_kv, None, cells, rows_t[q_index], take, bias))
                    continue
                buf = None if self.graphs is None else self.graphs.buffer((id(cache), swa, st), (len(rows), n_kv), cache.device)
                mask = cache.kq_mask(self.ubatch, st, rows, n_kv, swa, out=buf, visible=vis)
                out.append(AttnGroup(rows_t, st, n_kv, mask, visible=visible_cells_np(vis) if cells and not gather else None))
            self.masks[key] = out
        return self.masks[key]


@dataclass(slots=True)
class GraphCache:
    """Input buffers keyed by the ubatch's shape: (n_tokens, n_kv of every stream of every
    cache).  begin() counts a build when the shape is new (buffers allocated) and a reuse when
    it was seen (buffers overwritten in place).  At most `max_shapes` shapes are kept."""

    device: torch.device
    max_shapes: int = 8
    n_builds: int = 0
    n_reuses: int = 0
    _shapes: dict[tuple, dict[tuple, torch.Tensor]] = field(default_factory=dict)
    _cur: dict[tuple, torch.Tensor] | None = None

    def begin(self, key: tuple) -> None:
        if key in self._shapes:
            self.n_reuses += 1
            self._shapes[key] = self._shapes.pop(key)  # most recent last
        else:
            self.n_builds += 1
            if len(self._shapes) >= self.max_shapes:
                self._shapes.pop(next(iter(self._shapes)))
            self._shapes[key] = {}
        self._cur = self._shapes[key]

    def buffer(self, name: tuple, shape: tuple[int, ...], device: torch.device | None = None) -> torch.Tensor:
        """The float32 buffer `name` of the current shape (allocated on first use) on `device`
        (default: the model's; a -nkvo cache's masks live in host memory)."""
        device = self.device if device is None else torch.device(device)
        t = self._cur.get(name)
        if t is None or tuple(t.shape) != shape or t.device != device:
            t = self._cur[name] = torch.empty(shape, dtype=torch.float32, device=device)
        return t


def make_inputs(ub: UBatch, device: torch.device, flash_attn: bool = True, graphs: GraphCache | None = None,
                deterministic: bool = False, work: ComputeWork | None = None) -> UBatchInputs:
    out_rows = np.nonzero(np.array(ub.output, dtype=bool))[0]
    return UBatchInputs(
        ubatch=ub,
        tokens=torch.tensor(ub.token, dtype=torch.long, device=device),
        pos=torch.tensor(ub.pos, dtype=torch.long, device=device),
        out_rows=torch.as_tensor(out_rows, dtype=torch.long, device=device),
        flash_attn=flash_attn,
        graphs=graphs,
        deterministic=deterministic,
        work=work,
    )
