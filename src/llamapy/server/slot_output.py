"""What comes out of a slot after a decode (llama-server's process_token / send_final_response):
its next token(s) from the step's logits, sampled, or verified against its draft by
speculative.verify (the CLI's loop runs the same code), each recorded and streamed to the
request's sink as an Event with its probabilities, and the request ended with its final event
(stop, length, or the reason the scheduler gives)."""
from __future__ import annotations

import time

import numpy as np
import torch

from ..context import Context
from ..sampling import token_probabilities
from ..speculative.verify import verify_draft
from .metrics import ServerMetrics
from .request import Event
from .slots import Slot, SlotState


class SlotOutput:
    """The scheduler's output side: one per Scheduler, sharing its context and metrics."""

    def __init__(self, ctx: Context, metrics: ServerMetrics) -> None:
        self.ctx = ctx
        self.metrics = metrics
        self.tok = ctx.model.tokenizer
        self._eog = torch.tensor(sorted(self.tok.vocab.eog_ids), dtype=torch.long)
        self._masked: torch.Tensor | None = None  # [n_vocab] logits()' ignore_eos copy, reused
        self.ctx_shift = False  # --context-shift: a full slot shifts (server/ctx_shift.py) instead of ending

    def sample(self, s: Slot) -> None:
        """The slot's next token(s) from this step's logits (its rows from s.i_batch on): with a
        draft, verified by speculative.verify_draft (accepted drafts emitted, the first
        rejected one replaced by the token verify drew, one more token sampled when all are
        accepted; the cells of drafts not kept removed); without, one sample.  The server's
        draft counters are counted here, the request's by the verification."""
        draft, s.draft = s.draft, []
        m, spec, row0 = self.metrics, s.spec, s.i_batch
        n_accepted0 = 0
        if draft:
            del s.cache_tokens[len(s.cache_tokens) - len(draft) :]  # up to `sampled`, as without a draft
            m.n_draft_tokens, m.n_draft_verif_steps = m.n_draft_tokens + len(draft), m.n_draft_verif_steps + 1
            n_accepted0 = spec.n_accepted
        try:
            verify_draft(self.ctx, s.id, len(s.cache_tokens) - 1, s.cache_tokens, draft, s.sampler, spec,
                         lambda j: self.logits(s, row0 + j), lambda t, logits: self.emit(s, t, logits))
        finally:
            if draft:
                m.n_draft_accepted += spec.n_accepted - n_accepted0

    def logits(self, s: Slot, row: int) -> torch.Tensor:
        """Batch row `row`'s logits [n_vocab], end-of-generation tokens masked for ignore_eos and
        the request's logit_bias added:
        then a copy in one buffer that the next call overwrites (each row's logits are used up
        before the next row's are asked for; a fresh megabyte a row cost a server step ~2%)."""
        logits = self.ctx.get_logits_ith(row)  # [n_vocab]
        req = s.request
        if req.ignore_eos or req.logit_bias:
            if self._masked is None or self._masked.shape != logits.shape or self._masked.device != logits.device:
                self._masked = torch.empty_like(logits)
            # On the CPU one thread's memcpy: torch's copy_ splits a row this size among its threads,
            # and while the server streams, the second core is busy (0.5 ms a row; 30 us this way).
            if logits.device.type == "cpu" and logits.dtype == torch.float32:
                np.copyto(self._masked.numpy(), logits.detach().numpy())
            else:
                self._masked.copy_(logits)
            logits = self._masked
            if req.ignore_eos:
                logits[self._eog] = float("-inf")
            if req.logit_bias:  # llama-server's logit_bias: added (a token listed twice gets both)
                ids = torch.tensor([t for t, _ in req.logit_bias], dtype=torch.long, device=logits.device)  # [n_bias]
                vals = torch.tensor([b for _, b in req.logit_bias], dtype=logits.dtype, device=logits.device)  # [n_bias]
                logits.index_put_((ids,), vals, accumulate=True)
        return logits

    def emit(self, s: Slot, tok: int, logits: torch.Tensor) -> bool:
        """Record a generated token and stream it; False when the request ended with it."""
        req = s.request
        eog = self.tok.is_eog(tok)
        s.sampler.accept(tok, accept_grammar=not eog)
        if s.state is SlotState.PREFILLING:
            if s.spec is not None and s.spec.n_max > 0:  # a draft model reads the prompt as part of prompt
                s.spec.prefill(s.cache_tokens)  # processing (llama-server mirrors the prompt's batches into it)
            s.state, s.t_prompt_done = SlotState.GENERATING, time.perf_counter()
        s.n_decoded += 1
        self.metrics.on_tokens(1)
        if eog:
            self.finish(s, "stop")
            return False
        probs, prob = None, 0.0
        if req.n_probs > 0 and req.post_sampling_probs:  # the chain's candidates (Sampler.post_sampling_probs)
            prob, probs = s.sampler.post_sampling_probs(tok, req.n_probs)
        elif req.n_probs > 0:  # llama-server's default: probabilities before the sampler chain
            probs = token_probabilities(logits, req.n_probs)
            prob = float(torch.softmax(logits, dim=0)[tok])
        text = s.stops.push(s.decoder.feed(tok))
        req.sink(Event(req.id, text=text, token=tok, probs=probs, prob=prob, timings=s.timings() if req.timings_per_token else None))
        if s.stops.matched:
            self.finish(s, "stop")
        elif 0 <= req.max_tokens <= s.n_decoded:
            self.finish(s, "length")
        elif len(s.cache_tokens) + 1 >= s.n_ctx and not self.ctx_shift:  # llama-server's: one cell kept free
            s.truncated = True
            self.finish(s, "length")
        else:
            s.sampled = tok
            return True
        return False

    def finish(self, s: Slot, reason: str, error: str = "", drop_cells: bool = False) -> None:
        """End the slot's request with a final event; drop_cells also removes its cells."""
        req, ev, n_steps = s.request, s.final_event(reason, error), s.n_gen_steps()
        if drop_cells:
            self.ctx.memory.seq_rm(s.id, -1, -1)
            s.cache_tokens = []
        s.release()
        self.metrics.n_requests_finished += 1
        self.metrics.n_gen_steps_total += n_steps
        req.sink(ev)
