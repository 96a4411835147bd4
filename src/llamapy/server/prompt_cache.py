"""The slots' prompt caches (llama-server's prompt cache and slot choice): a slot keeps its
last request's cells when it goes idle; a new request goes to the idle slot whose cells share
enough of its prompt, keeps that prefix and decodes only the rest; idle slots' cells are given
up when the unified cache is full."""
from __future__ import annotations

from typing import Any

from ..tokens import common_prefix
from .slots import Slot

SLOT_PROMPT_SIMILARITY = 0.5  # llama-server's -sps default


def pick_slot(slots: list[Slot], idle: list[Slot], id_slot: int, prompt: list[int],
              similarity: float = SLOT_PROMPT_SIMILARITY) -> tuple[Slot, bool]:
    """llama-server's get_available_slot over the idle slots (or only the requested one, id_slot
    >= 0, modulo the slots): the slot whose cache shares the longest prefix with the prompt, if
    that prefix is more than `similarity` of the prompt; else the requested slot, else the least
    recently used idle slot.  (Picking the longest prefix however short would hand a new
    conversation the slot of another that shares only the chat template's first tokens, and
    evict it.)  Also says whether the slot's cache is about to be mostly lost (update_cache:
    taken by LRU, or the prompt keeps less than half of its tokens), when the host-memory prompt
    cache (server/ram_cache.py) saves it first."""
    wanted = slots[id_slot % len(slots)] if id_slot >= 0 else None
    cands = [wanted] if wanted is not None else idle
    if similarity > 0 and prompt:
        lcp, best = max(((common_prefix(s.cache_tokens, prompt), s) for s in cands), key=lambda t: (t[0], -t[1].t_last))
        if best.cache_tokens and lcp / len(prompt) > similarity:
            return best, lcp / len(best.cache_tokens) < 0.5
    if wanted is not None:
        return wanted, False
    return min(idle, key=lambda s: s.t_last), True


def keep_prefix(memory: Any, slot: Slot, n_keep: int) -> int:
    """After Slot.start(): the slot's cells from n_keep on removed, and none kept at all when
    the memory cannot reuse that prefix (SWA: the window may have moved on).  Returns the
    prompt tokens reused."""
    can_reuse = getattr(memory, "can_reuse_prefix", None)
    if n_keep > 0 and can_reuse is not None and not can_reuse(slot.id, n_keep):
        n_keep = slot.n_past = slot.n_cached = 0
        slot.cache_tokens = []
    memory.seq_rm(slot.id, n_keep, -1)
    return n_keep


def reuse_chunks(memory: Any, slot: Slot, prompt: list[int], n_min: int) -> int:
    """llama-server's --cache-reuse N (server-context.cpp, its cache_prompt branch): past the
    common prefix, chunks of at least n_min cached tokens that the prompt has next (text the
    prompt no longer holds was cut out between them) are moved back into place: seq_rm of the
    cells between, seq_add of the chunk (its K re-rotated at the next decode), and the slot's
    cache_tokens rewritten to match.  Returns the prompt tokens now cached in place (the
    caller keeps those; cells and tokens past them are dropped as for any prefix)."""
    cache = slot.cache_tokens
    n_past = head_c = head_p = common_prefix(cache, prompt)
    while head_c < len(cache) and head_p < len(prompt):
        n = 0
        while head_c + n < len(cache) and head_p + n < len(prompt) and cache[head_c + n] == prompt[head_p + n]:
            n += 1
        if n >= n_min:
            memory.seq_rm(slot.id, head_p, head_c)
            memory.seq_add(slot.id, head_c, head_c + n, head_p - head_c)
            cache[head_p:head_p + n] = cache[head_c:head_c + n]
            n_past, head_c, head_p = n_past + n, head_c + n, head_p + n
        else:
            head_c += 1
    return n_past


def free_idle_caches(memory: Any, slots: list[Slot]) -> bool:
    """Remove the cells idle slots keep as prompt caches; True when any were freed."""
    freed = False
    for s in slots:
        if s.is_idle and s.cache_tokens:
            memory.seq_rm(s.id, -1, -1)
            s.cache_tokens = []
            freed = True
    return freed
