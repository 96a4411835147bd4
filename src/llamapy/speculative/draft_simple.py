"""draft-simple (llama.cpp common/speculative.cpp): a smaller model with its own context and
KV cache drafts greedily, one token per decode, until n_max tokens or until its top
probability falls below p_min.  Its cache follows the target sequence: before drafting, the
cells past the longest common prefix with the sequence are removed (seq_rm) and the missing
tokens decoded; after verification, the rejected drafts' cells are removed the same way."""
from __future__ import annotations

import torch

from ..batch import Batch
from ..context import Context
from ..kernels.ops import argmax
from ..memory.factory import local_memory
from ..tokens import common_prefix


class VocabMismatchError(ValueError):
    """The draft model's vocabulary is not the target's."""


def check_same_vocab(target, draft) -> None:
    """Raise VocabMismatchError unless the two models share their vocabulary: the same size
    and the same token texts (every 997th id, and the first and last 64, compared)."""
    nt, nd = target.n_vocab, draft.n_vocab
    if nt != nd:
        raise VocabMismatchError(
            f"draft model vocabulary has {nd} tokens, the target's has {nt}: speculative decoding needs "
            f"the same vocabulary (choose another --spec-draft-model / -md)")
    vt, vd = target.tokenizer.vocab, draft.tokenizer.vocab
    ids = sorted(set(range(0, nt, 997)) | set(range(min(64, nt))) | set(range(max(0, nt - 64), nt)))
    for i in ids:
        if vt.tokens[i] != vd.tokens[i]:
            raise VocabMismatchError(
                f"draft and target vocabularies differ at token {i} ({vd.tokens[i]!r} vs "
                f"{vt.tokens[i]!r}), both of {nt} tokens: speculative decoding needs the same vocabulary")


class DraftSimple:
    """One sequence (seq_id) of a draft Context over its own model, tracking the tokens its
    cache holds; the server gives each slot its own sequence of one shared draft context."""

    def __init__(self, ctx: Context, p_min: float = 0.0, seq_id: int = 0) -> None:
        self.ctx = ctx
        self.p_min = p_min
        self.seq_id = seq_id
        self.cached: list[int] = []  # tokens in the draft cache, positions 0..

    def _sync(self, tokens: list[int]) -> None:
        """Make the cache hold exactly `tokens` with logits for the last one."""
        keep = common_prefix(self.cached, tokens)
        if keep == len(tokens):
            keep -= 1  # its logits are needed again: decode the last token anew
        self.ctx.memory.seq_rm(self.seq_id, keep, -1)
        self.cached = self.cached[:keep]
        n_batch = self.ctx.cparams.n_batch
        for i in range(keep, len(tokens), n_batch):
            b = Batch()
            chunk = tokens[i : i + n_batch]
            for j, t in enumerate(chunk):
                b.add(t, i + j, (self.seq_id,), logits=i + j == len(tokens) - 1)
            self.ctx.decode(b)
            self.cached.extend(chunk)

    def reset(self) -> None:
        """An empty draft sequence."""
        self.ctx.memory.seq_rm(self.seq_id, -1, -1)
        self.cached = []

    def prefill(self, tokens: list[int]) -> None:
        """The prompt into the draft cache while the target reads it, so the first draft does
        not pay for it."""
        if tokens and len(tokens) < self.ctx.n_ctx_seq:
            self._sync(tokens)

    def draft(self, tokens: list[int], n_max: int) -> list[int]:
        """Up to n_max greedy draft tokens after `tokens` (the sequence so far, its last one
        just sampled); fewer when the draft's top probability falls below p_min or its context
        is full."""
        if n_max <= 0 or len(tokens) + 1 >= self.ctx.n_ctx_seq:
            return []
        self._sync(tokens)
        out: list[int] = []
        while len(out) < n_max:
            logits = self.ctx.get_logits_ith(-1)  # [n_vocab]
            top = argmax(logits)
            if self.p_min > 0.0 and float(torch.softmax(logits.float(), dim=0)[top]) < self.p_min:
                break
            out.append(top)
            pos = len(self.cached)
            if len(out) == n_max or pos + 1 >= self.ctx.n_ctx_seq:
                break
            b = Batch()
            b.add(top, pos, (self.seq_id,), logits=True)
            self.ctx.decode(b)
            self.cached.append(top)
        return out

    def shift(self, n_keep: int, n_discard: int) -> None:
        """The target's context shift on this sequence too (llama-server shifts the draft's
        cache with the target's): cells n_keep .. n_keep + n_discard removed, the rest moved
        back by n_discard, so the next draft decodes only what is new.  A cache that cannot
        shift (a sliding-window one without --swa-full) drops everything past n_keep instead."""
        end = len(self.cached)
        if end <= n_keep or n_discard <= 0:
            return
        mem = self.ctx.memory
        if not getattr(local_memory(mem), "can_shift", True) or end <= n_keep + n_discard:
            mem.seq_rm(self.seq_id, n_keep, -1)
            self.cached = self.cached[:n_keep]
            return
        mem.seq_rm(self.seq_id, n_keep, n_keep + n_discard)
        mem.seq_add(self.seq_id, n_keep + n_discard, end, -n_discard)
        del self.cached[n_keep:n_keep + n_discard]

    def accepted(self, tokens: list[int]) -> None:
        """After verification: drop the cells of drafts the target rejected."""
        keep = common_prefix(self.cached, tokens)
        if keep < len(self.cached):
            self.ctx.memory.seq_rm(self.seq_id, keep, -1)
            self.cached = self.cached[:keep]
