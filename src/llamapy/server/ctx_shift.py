"""Context shift (llama-server's pre_decode, --context-shift): a generating slot whose cells are
full (its tokens + 1 >= n_ctx of the slot) drops n_discard tokens after its first n_keep and
moves the rest back, so generation goes on past the slot's size:

    n_keep    = the request's n_keep (--keep; -1: the whole prompt), + 1 when the vocab adds BOS,
                at most n_ctx - 4
    n_left    = tokens in the slot - n_keep
    n_discard = the request's n_discard, or n_left / 2; within [0, n_left - 1]

seq_rm(n_keep, n_keep + n_discard), then seq_add(n_keep + n_discard, end, -n_discard): the
cells keep their K and V, and K is rotated by -n_discard positions (RoPE) at the next decode
(KVCache.apply_shift).  Without --context-shift the slot's request ends there instead, with
finish_reason "length" (server/slot_output.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ..log import logger
from ..memory.factory import local_memory
from .slots import Slot

log = logger("srv")


@dataclass(frozen=True, slots=True)
class Shift:
    n_keep: int
    n_left: int
    n_discard: int


def needs_shift(s: Slot) -> bool:
    """The slot has no cell left for the token after its pending one."""
    return len(s.cache_tokens) + 1 >= s.n_ctx


def shift_numbers(n_tokens: int, n_ctx: int, n_prompt: int, n_keep: int, n_discard: int, add_bos: bool) -> Shift:
    """llama-server's n_keep / n_left / n_discard for a slot holding n_tokens of n_ctx cells."""
    keep = n_prompt if n_keep < 0 else n_keep
    if add_bos:
        keep += 1
    keep = min(n_ctx - 4, keep)
    n_left = n_tokens - keep
    discard = n_discard if n_discard else n_left // 2
    return Shift(keep, n_left, max(0, min(discard, max(0, n_left - 1))))


def context_shift(memory, s: Slot, n_keep: int, n_discard: int, add_bos: bool) -> Shift:
    """Shift the slot's sequence and its cache_tokens (see the module's docstring)."""
    sh = shift_numbers(len(s.cache_tokens), s.n_ctx, len(s.request.prompt), n_keep, n_discard, add_bos)
    log.warning(f"slot {s.id}: context shift, n_keep = {sh.n_keep}, n_left = {sh.n_left}, n_discard = {sh.n_discard}")
    end = len(s.cache_tokens)
    memory.seq_rm(s.id, sh.n_keep, sh.n_keep + sh.n_discard)
    memory.seq_add(s.id, sh.n_keep + sh.n_discard, end, -sh.n_discard)
    del s.cache_tokens[sh.n_keep:sh.n_keep + sh.n_discard]
    s.n_past = min(s.n_past, len(s.cache_tokens))
    s.truncated = True
    return sh


def can_shift(memory) -> bool:
    """llama.cpp's get_can_shift: an iSWA cache only when its window cache is full size
    (--swa-full); a plain KV cache always."""
    return bool(getattr(local_memory(memory), "can_shift", True))
