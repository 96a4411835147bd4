"""The server step's batch (llama-server's update_slots batch building): at most n_batch rows,
first the pending token of every generating slot followed by its draft (consecutive positions,
logits on every row, verified after the decode), then prompt chunks of prefilling slots, oldest
request first, in the room left (chunked prefill: a long prompt never stalls the others'
tokens).

Contract: a prompt's last token is decoded in a step after the rest of its prompt, never in
one chunk with the tokens before it.  That is the decode a prompt-cache hit makes (the slot
keeps the common prefix less one token, slots.Slot.start, as llama-server does), so a request
alone gets the same first logits, bit for bit, and so the same tokens, whether its prompt was
cached or not: the products' rounding depends on the rows they multiply (the 1-row, few-row
and many-row kernels), which llama.cpp's CPU products do not.  Cost: one step of one row per
prompt (a decode step's time), shared with the other slots' rows when any generate."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..batch import Batch
from ..speculative.verify import draft_tokens
from .slots import Slot, SlotState


@dataclass(frozen=True, slots=True)
class BatchRow:
    """What one row of the last batch was: for tests and /slots debugging."""

    slot: int
    pos: int
    kind: str  # "gen" | "draft" | "prompt"


@dataclass(slots=True)
class StepBatch:
    """One step's batch, its rows described, and per slot the tokens it adds to the slot's
    cache_tokens if the decode succeeds."""

    batch: Batch = field(default_factory=Batch)
    rows: list[BatchRow] = field(default_factory=list)
    added: list[tuple[Slot, list[int]]] = field(default_factory=list)
    held: set[int] = field(default_factory=set)  # slots whose chunk stopped before the prompt's last token with room left


def slot_draft(s: Slot, room: int) -> list[int]:
    """The slot's draft for this step, within the room left in the batch, the slot's cells
    (one kept free) and the tokens the request may still generate (less the one after the
    draft)."""
    if s.spec is None:
        return []
    n = min(room, s.n_ctx - len(s.cache_tokens) - 2)
    if s.request.max_tokens >= 0:
        n = min(n, s.request.max_tokens - s.n_decoded - 1)
    return draft_tokens(s.spec, s.sampler, s.cache_tokens + [s.sampled], n)


def build_step(slots: list[Slot], n_batch: int, with_prompts: bool = True, with_drafts: bool = True) -> StepBatch:
    """The step's batch over `slots`; sets each slot's i_batch (the row of its first logits,
    -1: none this step) and draft.  with_prompts / with_drafts False leave those rows out
    (the scheduler's fall-backs on a full cache)."""
    step = StepBatch()
    b, rows, added = step.batch, step.rows, step.added
    for s in slots:
        s.i_batch = -1
    for s in slots:  # 1. one token for every generating slot, and its draft
        s.draft = []
        if s.state is SlotState.GENERATING and b.n_tokens < n_batch:
            pos = len(s.cache_tokens)
            b.add(s.sampled, pos, (s.id,), logits=True)
            rows.append(BatchRow(s.id, pos, "gen"))
            s.i_batch = b.n_tokens - 1
            if with_drafts:
                s.draft = slot_draft(s, n_batch - b.n_tokens)
            for j, d in enumerate(s.draft):
                b.add(d, pos + 1 + j, (s.id,), logits=True)
                rows.append(BatchRow(s.id, pos + 1 + j, "draft"))
            added.append((s, [s.sampled] + s.draft))
    prefilling = sorted((s for s in slots if s.state is SlotState.PREFILLING), key=lambda s: s.request.t_arrival)
    for s in prefilling if with_prompts else ():  # 2. prompt chunks in the room left
        room = n_batch - b.n_tokens
        if room <= 0:
            break
        prompt = s.request.prompt
        i_last = len(prompt) - 1
        end = min(s.n_past + room, i_last if s.n_past < i_last else i_last + 1)  # the last token alone (contract)
        chunk = prompt[s.n_past : end]
        if end == i_last and s.n_past + room > i_last:
            step.held.add(s.id)
        for j, t in enumerate(chunk):
            pos = s.n_past + j
            last = pos == len(prompt) - 1
            b.add(t, pos, (s.id,), logits=last)
            rows.append(BatchRow(s.id, pos, "prompt"))
            if last:
                s.i_batch = b.n_tokens - 1
        added.append((s, chunk))
    return step
