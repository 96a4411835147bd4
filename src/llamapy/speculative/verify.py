"""One decode-and-verify step of speculative decoding, shared by the CLI's decode loop
(generate.py) and the server's (server/scheduler.py, one call per slot).

The contract, for one sequence whose cells hold `kept` (its last token, at position `pos`,
the token sampled last step) and a decode that put `draft` at positions pos+1.. with logits
on every row:

- draft_tokens() chose the draft: the speculator's, within the caller's room, cut where the
  grammar would reject it (drafts the grammar rejects are never verified);
- verify_draft() walks the rows in order: row j's logits verify draft[j] (Sampler.verify:
  greedy agreement, or rejection sampling that keeps the target's distribution); an accepted
  draft is emitted and, when generation goes on, its cell stays (appended to `kept`); the
  first rejected one is replaced by the token verify drew, emitted, and the walk stops; when
  every draft is accepted, the token after the last is sampled from the row after it.  The
  cells past what `kept` holds are removed (seq_rm), so the cache holds what a run without
  speculation would hold: the drafts accepted before a rejection, not the token a request
  ended on.  With an empty draft it is a plain decode step: one sample from row 0, emitted.
- The speculator counts as it goes (llama.cpp's draft_n / draft_n_accepted and the number of
  verifications): the drafted tokens before the first emit, each acceptance before its emit,
  since emitting may end a request whose timings report them.  Then Speculator.settle():
  the next draft's length, and the proposer told the sequence kept.

Emitting (recording, streaming, stop checks) stays the caller's: emit(token, logits) -> False
when generation ends with that token.  GrammarDeadEnd from the sampler or emit propagates,
with nothing rolled back or settled: the caller ends the sequence."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

    from ..context import Context
    from ..sampling import Sampler
    from .proposer import Speculator

Emit = Callable[[int, "torch.Tensor"], bool]


def draft_tokens(spec: "Speculator | None", sampler: "Sampler", tokens: list[int], n_max: int) -> list[int]:
    """The draft to decode after `tokens` (the sequence so far, its last token just sampled and
    not yet in the cache): at most n_max tokens from spec, cut to the prefix the sampler's
    grammar accepts; [] without a speculator or room (n_max <= 0: spec is not asked, so its
    backoff does not count the step)."""
    if spec is None or n_max <= 0:
        return []
    draft = spec.draft(tokens, n_max)
    grammar = sampler.grammar
    if draft and grammar is not None:
        draft = draft[: grammar.valid_prefix(draft)]
    return draft


def verify_draft(ctx: "Context", seq_id: int, pos: int, kept: list[int], draft: list[int], sampler: "Sampler",
                 spec: "Speculator | None", logits_at: Callable[[int], "torch.Tensor"], emit: Emit) -> bool:
    """After the decode of [the token at pos] + draft: verify, emit, roll back and count as the
    module docstring says.  logits_at(j): the logits [n_vocab] of the sequence's j-th row in
    that batch (0: the token at pos).  kept: the tokens of the sequence's cells, appended to in
    place.  Returns False when generation ended (an emit returned False)."""
    if draft:
        spec.n_drafted += len(draft)
        spec.n_verifications += 1
    n_ok = n_kept = 0
    going = True
    for j, d in enumerate(draft):
        logits = logits_at(j)
        token, ok = sampler.verify(logits, d)
        n_ok += ok
        spec.n_accepted += ok  # counted before emit: the request may end, with its timings, here
        going = emit(token, logits)
        if not going or not ok:
            break
        kept.append(d)  # accepted and generation goes on: its cell stays
        n_kept += 1
    else:  # every draft kept (or none): the token after the last comes from the row after it
        logits = logits_at(len(draft))
        going = emit(sampler.sample(logits), logits)
    if draft:
        if n_kept < len(draft):  # cells pos+1+n_kept .. pos+len(draft) hold rejected or unkept drafts
            ctx.memory.seq_rm(seq_id, pos + 1 + n_kept, -1)
        spec.settle(kept, len(draft), n_ok)
    return going
