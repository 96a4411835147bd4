"""A single-sequence generation loop over Context.decode(): prompt in n_batch chunks, then one
token per decode, sampled by a Sampler, stopping at end-of-generation or n_predict."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

from .batch import Batch
from .context import Context
from .grammar.constraint import GrammarDeadEnd
from .sampling import Sampler
from .speculative.verify import draft_tokens, verify_draft

if TYPE_CHECKING:
    import torch

    from .speculative import Speculator


@dataclass(slots=True)
class GenTimings:
    n_prompt: int = 0
    t_prompt: float = 0.0
    n_gen: int = 0
    t_gen: float = 0.0
    stop: str = ""
    tokens: list[int] = field(default_factory=list)
    n_drafted: int = 0  # speculative decoding: draft tokens verified
    n_accepted: int = 0  # ... and accepted
    n_verify: int = 0  # decodes that verified a draft
    n_verify_ubatches: int = 0  # ... and the ubatches they took (-ub splits a wide verification)
    error: str = ""  # why a "grammar" stop happened


def prefill(ctx: Context, ids: list[int], seq_id: int = 0) -> None:
    """Decode a prompt in n_batch-sized calls, logits for its last token only."""
    if not ids:
        raise ValueError("empty prompt: nothing to decode (add text or BOS)")
    n_batch = ctx.cparams.n_batch
    pos0 = ctx.memory.seq_pos_max(seq_id) + 1
    for i in range(0, len(ids), n_batch):
        b = Batch()
        chunk = ids[i : i + n_batch]
        for j, t in enumerate(chunk):
            b.add(t, pos0 + i + j, (seq_id,), logits=(i + j == len(ids) - 1))
        ctx.decode(b)


def generate(ctx: Context, sampler: Sampler, prompt: list[int], n_predict: int, seq_id: int = 0,
             timings: GenTimings | None = None, spec: "Speculator | None" = None,
             stop_at_eog: bool = True) -> Iterator[int]:
    """Yield sampled tokens; n_predict < 0 means until end-of-generation or the context is full.

    With a Speculator, each decode holds the sampled token and its draft as consecutive
    positions with logits on every row; the drafts are verified in order (Sampler.verify:
    greedy agreement, or rejection sampling that keeps the output distribution the target's)
    and the cells from the first rejected draft on are removed (seq_rm), so the cache holds
    what a run without speculation would hold (speculative.verify, shared with the server).
    The tokens one verification emits are yielded after it.  stop_at_eog False (benchmarks):
    an end-of-generation token is generated like any other."""
    tm = timings if timings is not None else GenTimings()
    tok = ctx.model.tokenizer
    t0 = time.perf_counter()
    prefill(ctx, prompt, seq_id)
    if spec is not None:  # a draft model reads the prompt now, as part of prompt processing
        spec.prefill(prompt)
    tm.n_prompt, tm.t_prompt = len(prompt), time.perf_counter() - t0
    for t in prompt:  # llama-cli pushes prompt tokens into the penalty window too
        sampler.accept(t)
    seq = list(prompt)  # the prompt and the tokens decoded after it: the draft source
    t0 = time.perf_counter()

    def emit(token: int) -> str:
        """Record a generated token; the stop reason, or "" to go on."""
        eog = tok.is_eog(token)
        sampler.accept(token, accept_grammar=not eog)
        if stop_at_eog and eog:
            return "eog"
        tm.tokens.append(token)
        tm.n_gen, tm.t_gen = len(tm.tokens), time.perf_counter() - t0
        return "length" if 0 <= n_predict <= len(tm.tokens) else ""

    if n_predict == 0:
        tm.stop = "length"
        return
    try:
        yield from _loop(ctx, sampler, spec, tm, emit, seq, n_predict, seq_id)
    except GrammarDeadEnd as e:  # the grammar left no token: the run ends here, with the reason
        tm.stop, tm.error = "grammar", str(e)
    tm.t_gen = time.perf_counter() - t0
    if spec is not None:
        tm.n_drafted, tm.n_accepted = spec.n_drafted, spec.n_accepted


def _loop(ctx: Context, sampler: Sampler, spec: "Speculator | None", tm: GenTimings, emit: Callable[[int], str],
          seq: list[int], n_predict: int, seq_id: int) -> Iterator[int]:
    """generate()'s decode loop after the prompt: sample and emit, then decode the token (with
    a draft) and verify (speculative.verify, the server's too).  seq: the prompt and the tokens
    decoded after it; a token enters it when it goes into a batch (a kept draft: verify_draft)."""
    n_ctx_seq = ctx.n_ctx_seq
    token = -1  # the token emitted last, decoded next
    out: list[int] = []  # emitted tokens not yet yielded

    def push(t: int, logits: "torch.Tensor | None" = None) -> bool:
        nonlocal token
        token = t
        stop = emit(t)
        if stop != "eog":
            out.append(t)
        if stop:
            tm.stop = stop
        return not stop

    going = push(sampler.sample(ctx.get_logits_ith(-1)))
    while True:
        yield from out
        out.clear()
        if not going:
            break
        pos = ctx.memory.seq_pos_max(seq_id) + 1
        if pos >= n_ctx_seq:
            tm.stop = "context"
            break
        seq.append(token)
        room = n_ctx_seq - pos - 1
        if n_predict >= 0:
            room = min(room, n_predict - len(tm.tokens))
        draft = draft_tokens(spec, sampler, seq, room)
        b = Batch()
        b.add(token, pos, (seq_id,), logits=True)
        for i, d in enumerate(draft):
            b.add(d, pos + 1 + i, (seq_id,), logits=True)
        ctx.decode(b)
        if draft:
            tm.n_verify += 1
            tm.n_verify_ubatches += ctx.stats.ubatches_per_decode[-1]
        try:
            going = verify_draft(ctx, seq_id, pos, seq, draft, sampler, spec, ctx.get_logits_ith, push)
        except GrammarDeadEnd:  # what was emitted before it still streams
            yield from out
            raise
