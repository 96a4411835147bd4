"""Scheduler (llama-server's update_slots loop), no HTTP in it.

Every step builds ONE batch of at most n_batch rows: first the pending token of every
generating slot, then prompt chunks of prefilling slots in the room left (chunked prefill, so
a long prompt never stalls the others' tokens).  One decode, then one sample per slot that
asked for logits.  Requests beyond the slots wait in FIFO order.  The loop runs in one
background thread; other threads only call submit() / cancel() / snapshot()."""
from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass

import torch

from ..batch import Batch
from ..context import Context
from ..log import logger
from ..memory.kv_cache import KVCacheFullError
from ..sampling import Sampler, token_probabilities
from ..tokenizer import StreamDecoder
from .metrics import ServerMetrics
from .request import Event, Request, Usage
from ..generate import common_prefix
from .slots import Slot, SlotState, check_prompt_fits

log = logger("srv")


@dataclass(frozen=True, slots=True)
class _Cancel:
    request_id: int
    reason: str = "cancelled"


@dataclass(frozen=True, slots=True)
class BatchRow:
    """What one row of the last batch was: for tests and /slots debugging."""

    slot: int
    pos: int
    kind: str  # "gen" | "prompt"


class Scheduler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.tok = ctx.model.tokenizer
        c = ctx.cparams
        self.n_batch = c.n_batch
        self.slots = [Slot(i, c.n_ctx_seq) for i in range(c.n_seq_max)]
        self.waiting: deque[Request] = deque()
        self.last_batch: list[BatchRow] = []
        self.metrics = ServerMetrics(kv_cells_total=ctx.memory.kv_size)
        self._inbox: queue.Queue[Request | _Cancel] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._snapshot: tuple[list[dict], dict] = ([s.info() for s in self.slots], self.metrics.snapshot())

    # --- called from any thread -------------------------------------------------------------
    def check(self, req: Request) -> None:
        """Raise PromptTooLongError / ValueError if the request can never run."""
        c = self.ctx.cparams
        check_prompt_fits(len(req.prompt), c.n_ctx_seq, c.n_ctx, c.n_seq_max, c.kv_unified)

    def submit(self, req: Request) -> None:
        self.check(req)
        self._inbox.put(req)

    def cancel(self, request_id: int) -> None:
        """Stop a request at the next step; its slot's cells are removed."""
        self._inbox.put(_Cancel(request_id))

    def snapshot(self) -> tuple[list[dict], dict]:
        """(per-slot info, metrics) as of the end of the last step."""
        return self._snapshot

    # --- the loop -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="llamapy-scheduler", daemon=True)
        self._thread.start()

    def stop(self, join: bool = False, timeout: float | None = None) -> None:
        """Ask the loop to end; every waiting or running request gets a final 'abort' event."""
        self._stop.set()
        if join and self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.update_slots():
                    self._drain_inbox(timeout=0.05)
            except Exception as e:  # a bug: fail the running requests, keep serving
                log.exception("update_slots failed")
                for s in self.slots:
                    if not s.is_idle:
                        self._finish(s, "error", error=f"internal error: {e}", drop_cells=True)
        self._drain_inbox()
        for s in self.slots:
            if not s.is_idle:
                self._finish(s, "abort", error="server is shutting down")
        while self.waiting:
            r = self.waiting.popleft()
            r.sink(Event(r.id, final=True, finish_reason="abort", error="server is shutting down", usage=Usage(len(r.prompt))))
        self._publish()

    def _drain_inbox(self, timeout: float = 0.0) -> None:
        """Move new requests to the queue and apply cancels; wait up to timeout for the first."""
        try:
            item = self._inbox.get(timeout=timeout) if timeout > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            if isinstance(item, _Cancel):
                self._apply_cancel(item)
            else:
                self.waiting.append(item)
                self.metrics.n_requests_total += 1
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _apply_cancel(self, c: _Cancel) -> None:
        for r in self.waiting:
            if r.id == c.request_id:
                self.waiting.remove(r)
                self.metrics.n_requests_cancelled += 1
                r.sink(Event(r.id, final=True, finish_reason="abort", error=c.reason, usage=Usage(len(r.prompt))))
                return
        for s in self.slots:
            if s.request is not None and s.request.id == c.request_id:
                self.metrics.n_requests_cancelled += 1
                self._finish(s, "abort", error=c.reason, drop_cells=True)
                return

    def update_slots(self) -> bool:
        """One step: take new requests, assign slots, build and decode one batch, sample.
        Returns False when there was nothing to do."""
        self._drain_inbox()
        self._assign()
        rows = self._decode_step()
        self._publish()
        return rows > 0

    def _assign(self) -> None:
        """Give waiting requests to idle slots: the one whose cache shares the longest prefix
        with the prompt, else the least recently used."""
        while self.waiting:
            idle = [s for s in self.slots if s.is_idle]
            if not idle:
                return
            req = self.waiting.popleft()
            slot = max(idle, key=lambda s: (common_prefix(s.cache_tokens, req.prompt), -s.t_last))
            sampler = Sampler(req.sampling, n_ctx=slot.n_ctx)
            n_keep = slot.start(req, sampler, StreamDecoder(self.tok))
            can_reuse = getattr(self.ctx.memory, "can_reuse_prefix", None)  # SWA: the window may have moved on
            if n_keep > 0 and can_reuse is not None and not can_reuse(slot.id, n_keep):
                n_keep = slot.n_past = slot.n_cached = 0
                slot.cache_tokens = []
            self.ctx.memory.seq_rm(slot.id, n_keep, -1)
            for t in req.prompt:  # like llama-server: prompt tokens enter the penalty window
                sampler.accept(t)

    # --- batch --------------------------------------------------------------------------------
    def _build(self, with_prompts: bool) -> tuple[Batch, list[tuple[Slot, list[int]]]]:
        """The step's batch and, per slot, the tokens it adds to the cache if decode succeeds."""
        b = Batch()
        rows: list[BatchRow] = []
        added: list[tuple[Slot, list[int]]] = []
        for s in self.slots:
            s.i_batch = -1
        for s in self.slots:  # 1. one token for every generating slot
            if s.state is SlotState.GENERATING and b.n_tokens < self.n_batch:
                pos = len(s.cache_tokens)
                b.add(s.sampled, pos, (s.id,), logits=True)
                rows.append(BatchRow(s.id, pos, "gen"))
                s.i_batch = b.n_tokens - 1
                added.append((s, [s.sampled]))
        prefilling = sorted((s for s in self.slots if s.state is SlotState.PREFILLING), key=lambda s: s.request.t_arrival)
        for s in prefilling if with_prompts else ():  # 2. prompt chunks in the room left
            room = self.n_batch - b.n_tokens
            if room <= 0:
                break
            prompt = s.request.prompt
            chunk = prompt[s.n_past : s.n_past + room]
            for j, t in enumerate(chunk):
                pos = s.n_past + j
                last = pos == len(prompt) - 1
                b.add(t, pos, (s.id,), logits=last)
                rows.append(BatchRow(s.id, pos, "prompt"))
                if last:
                    s.i_batch = b.n_tokens - 1
            added.append((s, chunk))
        self.last_batch = rows
        return b, added

    def _decode_step(self) -> int:
        """Decode this step's batch; on a full (unified) cache, free idle slots' prompt caches,
        then drop the prompt chunks, then end the longest generating slot with 'length'."""
        with_prompts = True
        while True:
            b, added = self._build(with_prompts)
            if b.n_tokens == 0:
                return 0
            t0 = time.perf_counter()
            try:
                self.ctx.decode(b)
                break
            except KVCacheFullError as e:
                if self._free_idle_caches():
                    continue
                gen = [s for s, _ in added if s.state is SlotState.GENERATING]
                if with_prompts and gen and len(gen) < len(added):
                    with_prompts = False
                    continue
                victim = max(gen or [s for s, _ in added], key=lambda s: len(s.cache_tokens))
                self._finish(victim, "length" if gen else "error", error=f"KV cache full: {e}", drop_cells=not gen)
        n_prompt = sum(len(t) for s, t in added if s.state is SlotState.PREFILLING)
        self.metrics.on_decode(len(added), n_prompt, b.n_tokens - n_prompt, time.perf_counter() - t0)
        for s, toks in added:
            s.cache_tokens.extend(toks)
            if s.state is SlotState.PREFILLING:
                s.n_past += len(toks)
        for s, _ in added:
            if s.i_batch >= 0:
                self._sample(s)
        return b.n_tokens

    def _free_idle_caches(self) -> bool:
        freed = False
        for s in self.slots:
            if s.is_idle and s.cache_tokens:
                self.ctx.memory.seq_rm(s.id, -1, -1)
                s.cache_tokens = []
                freed = True
        return freed

    # --- sampling and results -------------------------------------------------------------------
    def _sample(self, s: Slot) -> None:
        req = s.request
        logits = self.ctx.get_logits_ith(s.i_batch)  # [n_vocab]
        if req.ignore_eos:
            logits = logits.clone()
            logits[sorted(self.tok.vocab.eog_ids)] = float("-inf")
        tok = s.sampler.sample(logits)
        s.sampler.accept(tok)
        if s.state is SlotState.PREFILLING:
            s.state, s.t_prompt_done = SlotState.GENERATING, time.perf_counter()
        s.n_decoded += 1
        self.metrics.on_tokens(1)
        if self.tok.is_eog(tok):
            self._finish(s, "stop")
            return
        probs, prob = None, 0.0
        if req.n_probs > 0:  # llama-server's default: probabilities before the sampler chain
            probs = token_probabilities(logits, req.n_probs)
            prob = float(torch.softmax(logits, dim=0)[tok])
        text = s.stops.push(s.decoder.feed(tok))
        req.sink(Event(req.id, text=text, token=tok, probs=probs, prob=prob))
        if s.stops.matched:
            self._finish(s, "stop")
        elif 0 <= req.max_tokens <= s.n_decoded:
            self._finish(s, "length")
        elif len(s.cache_tokens) >= s.n_ctx:  # no cell left in the slot for this token
            self._finish(s, "length")
        else:
            s.sampled = tok

    def _finish(self, s: Slot, reason: str, error: str = "", drop_cells: bool = False) -> None:
        """End the slot's request with a final event; drop_cells also removes its cells."""
        req, ev = s.request, s.final_event(reason, error)
        if drop_cells:
            self.ctx.memory.seq_rm(s.id, -1, -1)
            s.cache_tokens = []
        s.release()
        self.metrics.n_requests_finished += 1
        req.sink(ev)

    def _publish(self) -> None:
        m = self.metrics
        m.n_requests_processing = sum(not s.is_idle for s in self.slots)
        m.n_requests_deferred = len(self.waiting)
        m.kv_cells_used = self.ctx.memory.n_used()
        self._snapshot = ([s.info() for s in self.slots], m.snapshot())
