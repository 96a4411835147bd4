"""What one ubatch's forward needs besides the weights (llama.cpp's graph inputs)."""
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
                out.append((torch.as_tensor(rows), st, n_kv, cache.kq_mask(self.ubatch, st, rows, n_kv, swa)))
            self.masks[key] = out
        return self.masks[key]


def make_inputs(ub: UBatch, device: torch.device, flash_attn: bool = True) -> UBatchInputs:
    out_rows = np.nonzero(np.array(ub.output, dtype=bool))[0]
    return UBatchInputs(
        ubatch=ub,
        tokens=torch.tensor(ub.token, dtype=torch.long, device=device),
        pos=torch.tensor(ub.pos, dtype=torch.long, device=device),
        out_rows=torch.as_tensor(out_rows, dtype=torch.long, device=device),
        flash_attn=flash_attn,
    )
