"""The slots' prompt caches (llama-server's prompt cache and slot choice): a slot keeps its
last request's cells when it goes idle; a new request goes to the idle slot whose cells share
enough of its prompt, keeps that prefix and decodes only the rest; idle slots' cells are given
up when the unified cache is full."""
from __future__ import annotations

from typing import Any

from ..tokens import common_prefix
from .slots import Slot

SLOT_PROMPT_SIMILARITY = 0.5  # llama-server's -sps default


def pick_slot(idle: list[Slot], prompt: list[int], similarity: float = SLOT_PROMPT_SIMILARITY) -> Slot:
    """llama-server's get_available_slot: the idle slot whose cache shares the longest
    prefix with the prompt, if that prefix is more than `similarity` of the prompt; else the
    least recently used idle slot.  (Picking the longest prefix however short would hand a new
    conversation the slot of another that shares only the chat template's first tokens, and
    evict it.)"""
    if similarity > 0 and prompt:
        lcp, best = max(((common_prefix(s.cache_tokens, prompt), s) for s in idle), key=lambda t: (t[0], -t[1].t_last))
        if lcp / len(prompt) > similarity:
            return best
    return min(idle, key=lambda s: s.t_last)


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


def free_idle_caches(memory: Any, slots: list[Slot]) -> bool:
    """Remove the cells idle slots keep as prompt caches; True when any were freed."""
    freed = False
    for s in slots:
        if s.is_idle and s.cache_tokens:
            memory.seq_rm(s.id, -1, -1)
            s.cache_tokens = []
            freed = True
    return freed
