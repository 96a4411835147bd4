"""Scheduler (llama-server's update_slots loop), no HTTP in it.

Every step builds ONE batch of at most n_batch rows (server/step_batch.py: the pending token
of every generating slot with its draft, then prompt chunks of prefilling slots in the room
left).  One decode, then each slot that asked for logits gets its next token(s)
(server/slot_output.py: sampled or verified, streamed, finished).  Requests beyond the slots
wait in FIFO order and take the slot whose prompt cache fits them (server/prompt_cache.py).
The loop runs in one background thread; other threads only call submit() / cancel() /
snapshot()."""
from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass

from ..context import Context
from ..log import logger
from ..memory.kv_cache import KVCacheFullError
from ..pipeline.comm import StageError
from ..grammar import GrammarDeadEnd
from ..sampling import Sampler
from ..tokenizer.build import release_heap
from ..tokenizer import StreamDecoder
from .ctx_shift import can_shift, context_shift, needs_shift
from .engine_events import EngineEvents
from .metrics import ServerMetrics
from .lora_scales import bind_slot_lora, check_ids
from .prompt_cache import SLOT_PROMPT_SIMILARITY, free_idle_caches, keep_prefix, pick_slot, reuse_chunks
from .ram_cache import PromptCacheRAM
from .request import Event, Request, Usage
from .slot_files import SlotAction, SlotActionError, run_ready
from .slot_output import SlotOutput
from .slots import Slot, SlotState, check_prompt_fits
from .step_batch import BatchRow, StepBatch, build_step
from ..speculative import SpecParams, Speculator

__all__ = ["BatchRow", "QueueFullError", "SLOT_PROMPT_SIMILARITY", "Scheduler"]
log = logger("srv")
TRIM_EVERY_S = 5.0  # at most this often, when idle, freed heap memory goes back to the OS (malloc_trim)


class QueueFullError(RuntimeError):
    """More requests waiting than --max-queue: the message names the numbers (an HTTP 503)."""


@dataclass(frozen=True, slots=True)
class _Cancel:
    request_id: int
    reason: str = "cancelled"


class Scheduler:
    def __init__(self, ctx: Context, spec: SpecParams | None = None, proposers: list | None = None,
                 max_queue: int = 0, slot_prompt_similarity: float = SLOT_PROMPT_SIMILARITY,
                 ctx_shift: bool = False, n_keep: int = 0, n_cache_reuse: int = 0) -> None:
        """spec: the server's speculative decoding (--spec-type ...), with one proposer per
        slot (speculative.make_proposers); None or type none: no drafts.  max_queue: how many
        requests may wait for a slot (0: no bound); one more is refused (QueueFullError).
        slot_prompt_similarity: llama-server's -sps (see _assign).  ctx_shift: --context-shift
        (server/ctx_shift.py; off where the memory cannot shift), n_keep: --keep, n_cache_reuse:
        --cache-reuse (prompt_cache.reuse_chunks; also off where the memory cannot shift)."""
        self.ctx = ctx
        ctx.reuse_logits = True  # each step's logits are used up before the next decode
        self.max_queue = max_queue
        self.slot_prompt_similarity = slot_prompt_similarity
        self._n_queued = 0  # submitted, not yet in a slot nor ended (guarded by _queue_lock)
        self._queue_lock = threading.Lock()
        self.spec = spec if spec is not None and spec.type != "none" else None
        self.proposers = proposers or []
        self.tok = ctx.model.tokenizer
        c = ctx.cparams
        self.n_batch = c.n_batch
        self.slots = [Slot(i, c.n_ctx_seq) for i in range(c.n_seq_max)]
        if self.spec is not None and len(self.proposers) != len(self.slots):
            raise ValueError(f"{len(self.proposers)} draft sources for {len(self.slots)} slots")
        self.waiting: deque[Request] = deque()
        self.last_batch: list[BatchRow] = []
        self.metrics = ServerMetrics(kv_cells_total=ctx.memory.kv_size)
        self.out = SlotOutput(ctx, self.metrics)  # sampling / verification, streaming, finishing
        self.n_keep, self.n_cache_reuse = n_keep, n_cache_reuse
        if ctx_shift and not can_shift(ctx.memory):
            log.warning("ctx_shift is not supported by this context (a sliding-window cache without --swa-full), it will be disabled")
        self.ctx_shift = ctx_shift and can_shift(ctx.memory)
        self._inbox: queue.Queue[Request | _Cancel] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._snapshot: tuple[list[dict], dict] = ([s.info() for s in self.slots], self.metrics.snapshot())
        self.embedder = None  # --embedding: an embed.Embedder; EmbedJobs then run in this loop (embed_jobs.py)
        self.embed_jobs: list = []
        self.slot_actions: list[SlotAction] = []  # POST /slots/{id}?action=..., run when their slot is idle
        self.events = EngineEvents()  # /engine/events: a view per step, built only while someone listens
        self.ram: PromptCacheRAM | None = None  # --cache-ram: a ram_cache.PromptCacheRAM (server/startup.py sets it)

    @property
    def ctx_shift(self) -> bool:
        return self.out.ctx_shift

    @ctx_shift.setter
    def ctx_shift(self, on: bool) -> None:
        self.out.ctx_shift = on

    # --- called from any thread -------------------------------------------------------------
    def check(self, req: Request) -> None:
        """Raise PromptTooLongError / ValueError if the request can never run."""
        c = self.ctx.cparams
        check_prompt_fits(len(req.prompt), c.n_ctx_seq, c.n_ctx, c.n_seq_max, c.kv_unified)
        check_ids(req.lora or {}, len(self.ctx.model.lora.adapters) if self.ctx.model.lora is not None else 0)
        if self.spec is not None and req.spec:
            limit = self.spec.draft_len
            n_max = int(req.spec.get("n_max", limit))
            if n_max > limit:
                flag = "--spec-ngram-simple-size-m" if self.spec.type == "ngram-simple" else "--spec-draft-n-max"
                raise ValueError(f"speculative.n_max ({n_max}) exceeds the server's limit ({flag} {limit})")
            if int(req.spec.get("n_min", 0)) > n_max:
                raise ValueError(f"speculative.n_min ({int(req.spec['n_min'])}) exceeds speculative.n_max ({n_max})")

    def submit(self, req: Request) -> None:
        self.check(req)
        with self._queue_lock:
            if self.max_queue and self._n_queued >= self.max_queue:
                raise QueueFullError(
                    f"server busy: {self._n_queued} requests already wait for the {len(self.slots)} slots "
                    f"(--max-queue {self.max_queue}); retry later")
            self._n_queued += 1
        self._inbox.put(req)

    def submit_embed(self, job) -> None:
        """Queue an EmbedJob (server/embed_jobs.py): run at the next step, with the others waiting."""
        if self.embedder is None:
            raise ValueError("This server does not support embeddings. Start it with `--embeddings`")
        self.embedder.check(job.seqs)
        self._inbox.put(job)

    def submit_slot_action(self, a: SlotAction) -> None:
        """Queue a slot action (server/slot_files.py): it runs once its slot is idle."""
        if not 0 <= a.id_slot < len(self.slots):
            raise ValueError(f"Invalid slot ID: {a.id_slot} (the server has {len(self.slots)} slots, -np)")
        self._inbox.put(a)

    def _dequeued(self) -> None:
        with self._queue_lock:
            self._n_queued -= 1

    def cancel(self, request_id: int) -> None:
        """Stop a request at the next step; its slot's cells are removed."""
        self._inbox.put(_Cancel(request_id))

    def busy(self) -> bool:
        """Requests queued or running (read from another thread: a hint, not a lock)."""
        return self._n_queued > 0 or any(not s.is_idle for s in self.slots)

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
        t_trim = time.monotonic()
        while not self._stop.is_set():
            try:
                if not self.update_slots():
                    if time.monotonic() - t_trim > TRIM_EVERY_S:  # idle: hand freed heap back to the OS
                        release_heap()
                        t_trim = time.monotonic()
                    self._drain_inbox(timeout=0.05)
            except StageError as e:  # a pipeline stage is lost: fail the running requests with its message
                for s in self.slots:
                    if not s.is_idle:
                        self._finish(s, "error", error=str(e), drop_cells=True)
            except Exception as e:  # a bug: fail the running requests, keep serving
                log.exception("update_slots failed")
                for s in self.slots:
                    if not s.is_idle:
                        self._finish(s, "error", error=f"internal error: {e}", drop_cells=True)
        self._drain_inbox()
        for j in self.embed_jobs:
            j.done(RuntimeError("server is shutting down"))
        for a in self.slot_actions:
            a.done(None, SlotActionError("server is shutting down", 503))
        for s in self.slots:
            if not s.is_idle:
                self._finish(s, "abort", error="server is shutting down")
        while self.waiting:
            r = self.waiting.popleft()
            self._dequeued()
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
            elif isinstance(item, SlotAction):
                self.slot_actions.append(item)
            elif not isinstance(item, Request):  # an EmbedJob
                self.embed_jobs.append(item)
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
                self._dequeued()
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
        if self.embed_jobs:  # every waiting embedding request's sequences, packed many to a batch
            from .embed_jobs import run_jobs

            jobs, self.embed_jobs = self.embed_jobs, []
            t0 = time.perf_counter()
            if n := run_jobs(self.embedder, jobs):  # llama-server counts an embedding's prompt and decode
                self.metrics.on_decode(len(jobs), n, 0, time.perf_counter() - t0)
            return n > 0
        self._expire()
        ran = run_ready(self.ctx, self.slots, self.slot_actions)  # slot actions whose slot is idle
        self._assign()
        self._shift_contexts()
        rows = self._decode_step()
        self._publish(decoded=rows > 0 or ran)
        return rows > 0

    def _expire(self) -> None:
        """End the requests older than their timeout (--timeout), waiting or running."""
        now = time.perf_counter()
        for r in [r for r in self.waiting if r.expired(now)]:
            self.waiting.remove(r)
            self._dequeued()
            r.sink(Event(r.id, final=True, finish_reason="timeout", usage=Usage(len(r.prompt)),
                         error=f"request waited {now - r.t_arrival:.1f} s for a slot, past --timeout {r.timeout:g} s"))
        for s in self.slots:
            if s.request is not None and s.request.expired(now):
                r = s.request
                self._finish(s, "timeout", error=f"request ran {now - r.t_arrival:.1f} s, past --timeout {r.timeout:g} s",
                             drop_cells=True)

    def _assign(self) -> None:
        """Give waiting requests to idle slots (prompt_cache.pick_slot; --cache-ram: ram_cache.py),
        in arrival order; a request for a given slot (id_slot, modulo the slots as llama-server's)
        waits for it while the requests behind it go on."""
        i = 0
        while i < len(self.waiting):
            idle = [s for s in self.slots if s.is_idle]
            if not idle:
                return
            req = self.waiting[i]
            if req.id_slot >= 0 and not self.slots[req.id_slot % len(self.slots)].is_idle:
                i += 1
                continue
            del self.waiting[i]
            self._dequeued()
            slot, update_cache = pick_slot(self.slots, idle, req.id_slot, req.prompt, self.slot_prompt_similarity)
            if self.ram is not None:
                self.ram.on_pick(self.ctx.memory, slot, req.prompt, update_cache)
            try:
                sampler = Sampler(req.sampling, n_ctx=slot.n_ctx, grammar=req.constraint)
            except Exception as e:  # noqa: BLE001 - this request's own settings: it ends, the others go on
                log.exception("request %s: its sampler could not be made", req.id)
                req.sink(Event(req.id, final=True, finish_reason="error", usage=Usage(len(req.prompt)),
                               error=f"sampling settings rejected: {e}"))
                continue
            bind_slot_lora(self.ctx, slot, req.lora)  # before any reuse: other scales' cells are dropped
            n_reuse = self.n_cache_reuse if req.n_cache_reuse is None else req.n_cache_reuse
            if n_reuse > 0 and req.cache_prompt and can_shift(self.ctx.memory):
                reuse_chunks(self.ctx.memory, slot, req.prompt, n_reuse)
            n_keep = slot.start(req, sampler, StreamDecoder(self.tok))
            slot.spec = self._speculator(slot.id, req)
            n_keep = keep_prefix(self.ctx.memory, slot, n_keep)
            if self.ram is not None:
                self.ram.on_launch(self.ctx.memory, self.slots)
            self.metrics.n_prompt_tokens_cached_total += n_keep
            if req.return_progress:  # llama-server's 0% update, before any prompt token is decoded
                req.sink(slot.progress_event())
            for t in req.prompt:  # like llama-server: prompt tokens enter the penalty window
                sampler.accept(t)

    def _shift_contexts(self) -> None:
        """Generating slots with no cell left for their next token: a context shift, or (off)
        the end of their request (SlotOutput ends them first; this is the safety net)."""
        for s in self.slots:
            if s.state is SlotState.GENERATING and needs_shift(s):
                if not self.ctx_shift:
                    s.truncated = True
                    self._finish(s, "length")
                    continue
                r = s.request
                sh = context_shift(self.ctx.memory, s, self.n_keep if r.n_keep is None else r.n_keep, r.n_discard, self.tok.add_bos)
                if s.spec is not None:  # a draft model's cache follows the shift (llama-server shifts ctx_dft too)
                    s.spec.shift(sh.n_keep, sh.n_discard)

    # --- batch --------------------------------------------------------------------------------
    def _speculator(self, slot_id: int, req: Request) -> Speculator | None:
        """The request's drafting on its slot's draft source: its speculative.n_max / n_min /
        p_min over the server's (n_max 0: no drafts)."""
        if self.spec is None:
            return None
        o = req.spec
        prop = self.proposers[slot_id]
        if hasattr(prop, "p_min"):
            prop.p_min = float(o.get("p_min", self.spec.p_min))
        return Speculator(prop, int(o.get("n_max", self.spec.draft_len)), int(o.get("n_min", self.spec.n_min)))

    def _build(self, with_prompts: bool, with_drafts: bool = True) -> StepBatch:
        """The step's batch (step_batch.build_step) and, per slot, the tokens it adds to the
        cache if decode succeeds; the rows kept in last_batch."""
        step = build_step(self.slots, self.n_batch, with_prompts, with_drafts)
        self.last_batch = step.rows
        return step

    def _decode_step(self) -> int:
        """Decode this step's batch; on a full (unified) cache, free idle slots' prompt caches,
        then drop the prompt chunks, then end the longest generating slot with an error (HTTP 500,
        llama-server's "Context size has been exceeded."; llama-server ends every slot there, its
        TODO is this: only the largest), its cells freed for the others."""
        with_prompts = with_drafts = True
        while True:
            step = self._build(with_prompts, with_drafts)
            b, added = step.batch, step.added
            if b.n_tokens == 0:
                return 0
            t0 = time.perf_counter()
            try:
                self.ctx.decode(b)
                break
            except KVCacheFullError as e:
                if free_idle_caches(self.ctx.memory, self.slots):
                    continue
                if with_drafts and any(s.draft for s, _ in added):
                    with_drafts = False
                    continue
                gen = [s for s, _ in added if s.state is SlotState.GENERATING]
                if with_prompts and gen and len(gen) < len(added):
                    with_prompts = False
                    continue
                victim = max(gen or [s for s, _ in added], key=lambda s: len(s.cache_tokens))
                self._finish(victim, "error", drop_cells=True, error=f"Context size has been exceeded: {e}; this "
                             f"request held {len(victim.cache_tokens)} of them and ends here")  # llama-server's words
        n_prompt = sum(len(t) for s, t in added if s.state is SlotState.PREFILLING)
        self.metrics.on_decode(len(added), n_prompt, b.n_tokens - n_prompt, time.perf_counter() - t0)
        for s, toks in added:
            s.cache_tokens.extend(toks)
            if s.state is SlotState.PREFILLING:
                s.n_past += len(toks)
                if s.request.return_progress and s.id not in step.held:  # llama-server's, after each prompt batch
                    s.request.sink(s.progress_event())
        self.metrics.n_tokens_max = max([self.metrics.n_tokens_max, *(len(s.cache_tokens) for s, _ in added)])
        for s, _ in added:
            if s.i_batch >= 0:
                try:
                    self.out.sample(s)
                except GrammarDeadEnd as e:  # this request ends; the others go on
                    self.ctx.memory.seq_rm(s.id, len(s.cache_tokens), -1)
                    self._finish(s, "grammar", error=str(e))
        return b.n_tokens

    def _finish(self, s: Slot, reason: str, error: str = "", drop_cells: bool = False) -> None:
        """End the slot's request with a final event (SlotOutput.finish)."""
        self.out.finish(s, reason, error, drop_cells)

    def _publish(self, decoded: bool = False) -> None:
        m = self.metrics
        m.n_requests_processing = sum(not s.is_idle for s in self.slots)
        m.n_requests_deferred = len(self.waiting)
        m.kv_cells_used = self.ctx.memory.n_used()
        m.kv_cells_cached = sum(len(s.cache_tokens) for s in self.slots if s.is_idle)
        self._snapshot = ([s.info() for s in self.slots], m.snapshot())
        self.events.publish(self, *self._snapshot, decoded)
