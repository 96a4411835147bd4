"""llama-server's host-memory prompt cache (`--cache-ram N`, its server_prompt_cache in
server-task.cpp and the slot's prompt_save / prompt_load in server-context.cpp).

When a slot's cached prompt is about to be mostly lost (the new request was given the slot by
LRU, or it keeps less than half of the slot's tokens), the slot's KV state (memory/seq_state.py:
its cells' positions and K/V rows, copied to host memory) is saved here first, and the entry
that best fits the new prompt is loaded into the slot instead (the one sharing the longest
prefix that also keeps at least a quarter of its own tokens).  With `--cache-idle-slots` (on by
default, as llama-server's) every idle slot is saved when a request starts on another, and with
a unified KV cache its cells are then freed for the running requests: a later request that
shares the prefix gets it back from here.

The entries' bytes (K/V rows, positions, shifts and tokens) never exceed the limit: an entry
larger than it is not saved, and the oldest entries go before a new one is copied.  As
llama-server, the tokens held are also bounded by n_ctx, or by what the byte limit holds at the
entries' mean bytes per token when that is more.  The state is on /metrics
(llamacpp:prompt_cache_bytes, _prompts, _tokens, _limit_bytes) and, with -v, llama-server's
trace lines ("updating prompt cache", " - cache state: ...")."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..log import logger
from ..memory.seq_state import CacheState, SeqStateError, caches_of, seq_state_get, seq_state_set, seq_state_size
from .slots import Slot

log = logger("srv")
MiB = 1024 * 1024
CACHE_RAM_MIB = 8192  # llama-server's --cache-ram default (common.h cache_ram_mib; -1: no limit, 0: off)


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    """The longest common prefix of two int32 token arrays."""
    n = min(a.size, b.size)
    d = np.flatnonzero(a[:n] != b[:n])
    return int(d[0]) if d.size else n


@dataclass(slots=True)
class CachedPrompt:
    """One saved slot: its tokens (int32 [n]), its KV state per cache, the LoRA scales its cells were made with."""

    tokens: np.ndarray
    state: list[CacheState]
    lora: tuple[float, ...] | None = None

    def size(self) -> int:
        return self.tokens.nbytes + sum(cs.n_bytes() for cs in self.state)


@dataclass(slots=True)
class PromptCacheRAM:
    """server_prompt_cache: the entries oldest first; limit_size in bytes and limit_tokens (0: no
    limit).  idle_slots: --cache-idle-slots; unified: the KV cache is one stream (an idle slot's
    cells are then freed once saved); verbose: -v (the trace and test-tag lines)."""

    limit_size: int
    limit_tokens: int
    idle_slots: bool = True
    unified: bool = False
    verbose: bool = False
    metrics: Any = None  # a ServerMetrics: its prompt_cache_* gauges follow every update
    states: list[CachedPrompt] = field(default_factory=list)
    peak: int = 0  # the most bytes the entries ever held (right after a copy, before update() trims)

    def size(self) -> int:
        return sum(e.size() for e in self.states)

    def n_tokens(self) -> int:
        return sum(int(e.tokens.size) for e in self.states)

    def _trace(self, msg: str) -> None:
        if self.verbose:
            log.info(msg)

    # --- server_prompt_cache ----------------------------------------------------------------
    def save(self, memory: Any, slot: Slot) -> bool:
        """prompt_save + alloc: the slot's cells copied in as a new entry; False when the slot is
        empty, its prompt is already held, or it is larger than the whole limit."""
        if not slot.cache_tokens:
            return False
        tokens = np.asarray(slot.cache_tokens, dtype=np.int32)
        size_new = seq_state_size(memory, slot.id) + tokens.nbytes
        self._trace(f" - saving prompt with length {tokens.size}, total state size = {size_new / MiB:.3f} MiB")
        if any(_lcp(e.tokens, tokens) == tokens.size for e in self.states):
            self._trace(" - prompt is already in the cache, skipping")
            return False
        if self.limit_size and size_new > self.limit_size:
            log.warning(f" - prompt state size {size_new / MiB:.3f} MiB exceeds cache size limit "
                        f"{self.limit_size / MiB:.3f} MiB (--cache-ram), skipping")
            return False
        kept = [e for e in self.states if _lcp(e.tokens, tokens) != e.tokens.size]
        if len(kept) != len(self.states):
            self._trace(f" - removing {len(self.states) - len(kept)} obsolete cached prompt(s) contained in this one")
            self.states = kept
        while self.limit_size and self.states and self.size() + size_new > self.limit_size:
            log.warning(f" - making room for prompt cache entry, removing oldest entry (size = {self.states[0].size() / MiB:.3f} MiB)")
            self.states.pop(0)
        try:
            state = seq_state_get(memory, slot.id)
        except MemoryError as e:  # llama-server's bad_alloc: the limit shrinks to 40% of what is held
            self.limit_size = max(1, int(0.4 * self.size()))
            log.error(f"failed to allocate memory for prompt cache state: {e}; cache size limit reduced to {self.limit_size / MiB:.3f} MiB")
            self.update()
            return False
        self.states.append(CachedPrompt(tokens, state, slot.lora))
        self.peak = max(self.peak, self.size())
        return True

    def load(self, memory: Any, slot: Slot, prompt: list[int]) -> bool:
        """The entry that fits prompt better than the slot's own cells goes into the slot (and
        leaves the cache); False when its state could not be restored (the caller clears the slot)."""
        cur, new = np.asarray(slot.cache_tokens, dtype=np.int32), np.asarray(prompt, dtype=np.int32)
        lcp = _lcp(cur, new)
        f_keep_best = lcp / cur.size if cur.size else -1.0  # an empty slot: any entry wins
        f_sim_best = lcp / max(1, new.size)
        self._trace(f" - looking for better prompt, base f_keep = {f_keep_best:.3f}, f_sim = {f_sim_best:.3f}")
        best = -1
        for i, e in enumerate(self.states):
            lcp = _lcp(e.tokens, new)
            f_keep, f_sim = lcp / e.tokens.size, lcp / max(1, new.size)
            self._trace(f"   - prompt with length {e.tokens.size:7d}, lcp = {lcp:7d}, f_keep = {f_keep:.3f}, f_sim = {f_sim:.3f}")
            if f_keep < 0.25:  # don't trash large prompts
                continue
            if f_keep_best < f_keep and f_sim_best < f_sim:
                f_keep_best, f_sim_best, best = f_keep, f_sim, i
        if best < 0:
            return True
        self._trace(f" - found better prompt with f_keep = {f_keep_best:.3f}, f_sim = {f_sim_best:.3f}")
        e = self.states[best]
        try:
            seq_state_set(memory, slot.id, e.state)
        except SeqStateError as err:
            log.error(f"failed to restore state with {e.tokens.size} tokens: {err}")
            log.warning(f"slot {slot.id}: failed to load prompt from cache")
            return False
        slot.cache_tokens, slot.lora = e.tokens.tolist(), e.lora
        del self.states[best]
        return True

    def update(self) -> None:
        """The oldest entries dropped while over the byte limit, then over the token limit (n_ctx,
        or what the byte limit holds at the entries' mean bytes per token, whichever is more)."""
        while self.limit_size and self.states and self.size() > self.limit_size:
            log.warning(f" - cache size limit reached, removing oldest entry (size = {self.states[0].size() / MiB:.3f} MiB)")
            self.states.pop(0)
        per_token = max(1.0, self.size() / max(1, self.n_tokens()))
        limit_tokens_cur = max(self.limit_tokens, int(self.limit_size / per_token)) if self.limit_size else self.limit_tokens
        while self.limit_tokens and self.states and self.n_tokens() > limit_tokens_cur:
            log.warning(f" - cache token limit ({self.limit_tokens}, est: {limit_tokens_cur}) reached, removing oldest entry "
                        f"(size = {self.states[0].size() / MiB:.3f} MiB)")
            self.states.pop(0)
        self._trace(f" - cache state: {len(self.states)} prompts, {self.size() / MiB:.3f} MiB (limits: {self.limit_size / MiB:.3f} MiB, "
                    f"{self.limit_tokens} tokens, {limit_tokens_cur} est)")
        for e in self.states:
            self._trace(f"   - prompt {id(e):#x}: {e.tokens.size:7d} tokens, checkpoints:  0, {e.size() / MiB:9.3f} MiB")
        if self.metrics is not None:
            m = self.metrics
            m.prompt_cache_bytes, m.prompt_cache_prompts, m.prompt_cache_tokens = self.size(), len(self.states), self.n_tokens()
            m.prompt_cache_limit_bytes = self.limit_size  # lowered after a failed allocation

    # --- the scheduler's two moments -------------------------------------------------------
    def on_pick(self, memory: Any, slot: Slot, prompt: list[int], update_cache: bool) -> None:
        """get_available_slot's end: when the slot's cache is about to be mostly lost, save it
        and load the entry that fits prompt best (the slot cleared if that fails)."""
        if not update_cache:
            return
        self._trace("updating prompt cache")
        self.save(memory, slot)
        if not self.load(memory, slot, prompt):
            memory.seq_rm(slot.id, -1, -1)
            slot.cache_tokens = []
        self.update()

    def on_launch(self, memory: Any, slots: list[Slot]) -> None:
        """After a request took its slot: --cache-idle-slots saves every idle slot, and with a
        unified cache clears it (its cells free for the running requests)."""
        if not self.idle_slots:
            return
        for s in slots:
            if not s.is_idle:
                continue
            if self.save(memory, s):
                self._trace(f"slot {s.id}: __TEST_TAG_CACHE_IDLE_SLOT__")
                self.update()
            if self.unified and s.cache_tokens:
                self._trace(f"slot {s.id}: clearing prompt with {len(s.cache_tokens)} tokens")
                memory.seq_rm(s.id, -1, -1)
                s.cache_tokens = []


def resolve_cache_ram(ctx: Any, cache_ram_mib: int, mib_given: bool, mem_budget_mib: float) -> int:
    """--cache-ram against the memory budget (memory/cache_ram.py): with --mem-budget the context's
    estimate and the prompt cache's bound must fit it together; without it, the prompt cache's
    bound must fit the host's free memory now (less fit.py's margin; the context is loaded).
    Returns the limit to run with (the flag's value, or lowered with a warning); raises
    CacheRamBudgetError when --cache-ram and --mem-budget were both given and do not fit."""
    from ..memory.cache_ram import cache_ram_estimate, fit_cache_ram
    from ..memory.fit import default_budget

    est = getattr(ctx, "estimate", None)
    if cache_ram_mib == 0 or est is None:  # off, or a pipeline's context (no prompt cache there)
        return cache_ram_mib
    c = cache_ram_estimate(est, cache_ram_mib)
    on_host = str(getattr(ctx.model, "device", "cpu")).startswith("cpu")
    budget_given = mem_budget_mib > 0 and on_host  # a device's --mem-budget does not bound host memory
    budget, used = (int(mem_budget_mib * MiB), est.total) if budget_given else (default_budget("cpu"), 0)
    mib = fit_cache_ram(c, used, budget, mib_given, budget_given)
    if mib != cache_ram_mib:
        what = f"the memory budget of {budget / MiB:.2f} MiB (--mem-budget) less the context's {used / MiB:.2f} MiB" \
            if budget_given else f"the host's free memory less 1024 MiB, {budget / MiB:.2f} MiB"
        log.warning(f"prompt cache: --cache-ram {cache_ram_mib} can hold up to {c.bound / MiB:.2f} MiB, over {what}; "
                    f"its limit is lowered to {mib} MiB" + (" (off)" if mib == 0 else "")
                    + " (set --cache-ram to choose, --mem-budget to change the budget)")
    return mib


def make_ram_cache(memory: Any, cache_ram_mib: int, n_ctx: int, idle_slots: bool, unified: bool,
                   verbose: bool = False, metrics: Any = None) -> PromptCacheRAM | None:
    """The server's prompt cache for --cache-ram N (MiB; -1: no limit, 0: none) and
    --cache-idle-slots, with llama-server's start-up lines; None when off, or when this memory
    cannot hand out a sequence's state (a pipeline's: then a warning says so)."""
    if cache_ram_mib == 0:
        log.info("prompt cache is disabled - use `--cache-ram N` to enable it")
        if idle_slots:
            log.warning("--cache-idle-slots requires --cache-ram, disabling")
        return None
    try:
        caches_of(memory)
    except SeqStateError as e:
        log.warning(f"prompt cache (--cache-ram {cache_ram_mib}) disabled: {e}")
        return None
    limit = "no limit" if cache_ram_mib < 0 else f"{cache_ram_mib} MiB"
    log.info(f"prompt cache is enabled, size limit: {limit} (host memory; use `--cache-ram 0` to disable the prompt cache)")
    if idle_slots:
        log.info("idle slots will be saved to prompt cache" + (" and cleared" if unified else "") + " upon starting a new task")
        if verbose:
            log.info("__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__")
    ram = PromptCacheRAM(MiB * max(0, cache_ram_mib), n_ctx, idle_slots, unified, verbose, metrics)
    ram.update()  # the metrics' limit from the start
    return ram
