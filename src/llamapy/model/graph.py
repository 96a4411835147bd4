"""What one ubatch's forward needs besides the weights (llama.cpp's graph inputs), and the
GraphCache that keeps those input buffers per (n_tokens, n_kv) shape, so single-stream
decode reuses them for 256 steps at a time (n_kv is padded to 256 for exactly this)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..batch.allocator import UBatch
from ..memory.kv_cache import KVCache, SlotInfo


@dataclass(slots=True)
class UBatchInputs:
    """inp_tokens [n_tokens], inp_pos [n_tokens], out_rows [n_outputs], and per KV cache the
    slot info plus one mask per stream group (rows, n_kv, mask [len(rows), n_kv])."""

    ubatch: UBatch
    tokens: torch.Tensor
    pos: torch.Tensor
    out_rows: torch.Tensor
    flash_attn: bool = True  # fused attention (-fa on/auto) or the explicit KQ matrix (-fa off)
    graphs: "GraphCache | None" = None
    sinfo: dict[int, SlotInfo] = field(default_factory=dict)  # id(cache) -> slot info
    masks: dict[tuple[int, bool], list[tuple[torch.Tensor, int, int, torch.Tensor]]] = field(default_factory=dict)

    def groups(self, cache: KVCache, swa: bool = False) -> list[tuple[torch.Tensor, int, int, torch.Tensor]]:
        """(rows, stream, n_kv, mask) for each stream this ubatch touches in `cache`; cached."""
        key = (id(cache), swa)
        if key not in self.masks:
            sinfo = self.sinfo[id(cache)]
            out = []
            for st, rows in sinfo.groups():
                n_kv = cache.n_kv(st)
                buf = None if self.graphs is None else self.graphs.buffer((id(cache), swa, st), (len(rows), n_kv))
                out.append((torch.as_tensor(rows), st, n_kv, cache.kq_mask(self.ubatch, st, rows, n_kv, swa, out=buf)))
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

    def buffer(self, name: tuple, shape: tuple[int, ...]) -> torch.Tensor:
        """The float32 buffer `name` of the current shape (allocated on first use)."""
        t = self._cur.get(name)
        if t is None or tuple(t.shape) != shape:
            t = self._cur[name] = torch.empty(shape, dtype=torch.float32, device=self.device)
        return t


def make_inputs(ub: UBatch, device: torch.device, flash_attn: bool = True, graphs: GraphCache | None = None) -> UBatchInputs:
    out_rows = np.nonzero(np.array(ub.output, dtype=bool))[0]
    return UBatchInputs(
        ubatch=ub,
        tokens=torch.tensor(ub.token, dtype=torch.long, device=device),
        pos=torch.tensor(ub.pos, dtype=torch.long, device=device),
        out_rows=torch.as_tensor(out_rows, dtype=torch.long, device=device),
        flash_attn=flash_attn,
        graphs=graphs,
    )
