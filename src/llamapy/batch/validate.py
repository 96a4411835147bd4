"""Validation half of llama_batch_allocr::init: check a Batch against the vocabulary, n_batch,
n_seq_max and the memory's positions, and resolve it into a ResolvedBatch.  No torch.

Nothing here writes anywhere: the memory is only read through seq_pos_max / seq_pos_min, and
the submitted Batch is not modified (resolved positions live in the ResolvedBatch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class BatchError(ValueError):
    """A batch that cannot be decoded; the message names the numbers and the flag to change."""


@dataclass(slots=True)
class ResolvedBatch:
    """A validated batch: positions filled in, seq ids de-duplicated (first one kept first),
    outputs resolved.  seq_set[i] is a bitset of slot i's sequences; seq_set_map lists the
    slots of each distinct set in submission order."""

    token: list[int]
    pos: list[int]
    seq_id: list[tuple[int, ...]]
    output: list[bool]
    output_ids: list[int]
    n_outputs: int
    seq_set: list[int]
    seq_set_map: dict[int, list[int]]
    seq_id_unq: tuple[int, ...]
    seq_pos_min: dict[int, int]
    seq_pos_max: dict[int, int]
    has_cpl: bool


def _check_shape(batch, n_vocab: int, n_batch: int, n_seq_max: int) -> list[tuple[int, ...]]:
    n = len(batch.token)
    if n == 0:
        raise BatchError("n_tokens == 0: cannot decode an empty batch")
    if n > n_batch:
        raise BatchError(f"n_tokens ({n}) > n_batch ({n_batch}): submit at most -b/--batch-size tokens "
                         f"per decode call, or raise -b/--batch-size")
    lens = {"pos": len(batch.pos), "seq_id": len(batch.seq_id), "logits": len(batch.logits)}
    if any(v != n for v in lens.values()):
        raise BatchError(f"batch fields disagree: token has {n} entries, "
                         + ", ".join(f"{k} {v}" for k, v in lens.items()))
    for i, t in enumerate(batch.token):
        if not 0 <= t < n_vocab:
            raise BatchError(f"token[{i}] = {t} is outside the vocabulary [0, n_vocab = {n_vocab})")
    seq_id: list[tuple[int, ...]] = []
    for i, sids in enumerate(batch.seq_id):
        if len(sids) == 0:
            raise BatchError(f"slot {i} has no seq_id: every slot needs at least one sequence")
        for s in sids:
            if not 0 <= s < n_seq_max:
                raise BatchError(f"seq_id[{i}] = {s} is outside [0, n_seq_max = {n_seq_max}): "
                                 f"raise -np/--parallel (n_seq_max)")
        seq_id.append(tuple(dict.fromkeys(sids)))
    return seq_id


def _resolve_pos(batch, seq_id: list[tuple[int, ...]], seq_pos_max: Callable[[int], int]) -> list[int]:
    """Explicit positions as given; None continues the slot's first sequence."""
    last: dict[int, int] = {}
    pos: list[int] = []
    for i, (p, sids) in enumerate(zip(batch.pos, seq_id)):
        if p is None:
            s0 = sids[0]
            p = (last[s0] if s0 in last else seq_pos_max(s0)) + 1
        elif p < 0:
            raise BatchError(f"pos[{i}] = {p} < 0: positions start at 0")
        for s in sids:
            last[s] = p
        pos.append(p)
    return pos


def _check_positions(pos: list[int], seq_id: list[tuple[int, ...]],
                     seq_pos_max: Callable[[int], int], seq_pos_min: Callable[[int], int] | None,
                     ) -> tuple[dict[int, int], dict[int, int], bool]:
    seq_pos: dict[int, set[int]] = {}
    cpl: dict[int, set[int]] = {}
    for p, sids in zip(pos, seq_id):
        for k, s in enumerate(sids):
            seq_pos.setdefault(s, set()).add(p)
            if k > 0:
                cpl.setdefault(s, set()).add(sids[0])
    pmin = {s: min(v) for s, v in seq_pos.items()}
    pmax = {s: max(v) for s, v in seq_pos.items()}
    for s in sorted(seq_pos):
        x = seq_pos_max(s)
        if x >= 0 and pmin[s] != x + 1:
            raise BatchError(
                f"sequence {s}: inconsistent positions: the last position of sequence {s} in the KV cache "
                f"is X = {x}, the batch starts it at Y = {pmin[s]}; positions must continue: Y = X + 1 "
                f"(remove the tail with seq_rm, or pass pos=None to continue automatically)")
        if pmax[s] - pmin[s] + 1 > len(seq_pos[s]):
            raise BatchError(f"sequence {s}: positions in the batch are not consecutive: "
                             f"{len(seq_pos[s])} distinct positions span [{pmin[s]}, {pmax[s]}]")
    if seq_pos_min is not None:
        for s1 in sorted(cpl):
            for s0 in sorted(cpl[s1]):
                if (seq_pos_min(s0), seq_pos_max(s0)) != (seq_pos_min(s1), seq_pos_max(s1)):
                    raise BatchError(
                        f"sequence {s1} is coupled to {s0} in the batch but they have diverged in the KV cache: "
                        f"[{seq_pos_min(s1)}, {seq_pos_max(s1)}] vs [{seq_pos_min(s0)}, {seq_pos_max(s0)}]")
    # llama.cpp also intersects each sequence's sets ("incompatible sequence sets"), but the
    # intersection always holds the sequence itself, so that check never fires: not ported.
    cur_pos: dict[int, int] = {}
    for i, (p, sids) in enumerate(zip(pos, seq_id)):
        for s in sids:
            if p < cur_pos.get(s, -1):
                raise BatchError(f"sequence {s}: positions decrease at slot {i}: "
                                 f"{p} after {cur_pos[s]} (positions must increase)")
            cur_pos[s] = p
    return pmin, pmax, bool(cpl)


def resolve_batch(batch, n_vocab: int, n_batch: int, n_seq_max: int,
                  seq_pos_max: Callable[[int], int], seq_pos_min: Callable[[int], int] | None,
                  output_all: bool) -> ResolvedBatch:
    """Validate `batch` (a Batch) and resolve it; raises BatchError naming the numbers."""
    seq_id = _check_shape(batch, n_vocab, n_batch, n_seq_max)
    pos = _resolve_pos(batch, seq_id, seq_pos_max)
    seq_set = [sum(1 << s for s in sids) for sids in seq_id]
    pmin, pmax, has_cpl = _check_positions(pos, seq_id, seq_pos_max, seq_pos_min)
    output = [True] * len(pos) if output_all else [bool(x) for x in batch.logits]
    output_ids: list[int] = []
    n_outputs = 0
    for o in output:
        output_ids.append(n_outputs if o else -1)
        n_outputs += o
    seq_set_map: dict[int, list[int]] = {}
    for i, c in enumerate(seq_set):
        seq_set_map.setdefault(c, []).append(i)
    return ResolvedBatch(
        token=[int(t) for t in batch.token], pos=pos, seq_id=seq_id, output=output,
        output_ids=output_ids, n_outputs=n_outputs, seq_set=seq_set, seq_set_map=seq_set_map,
        seq_id_unq=tuple(sorted(pmin)), seq_pos_min=pmin, seq_pos_max=pmax, has_cpl=has_cpl,
    )
