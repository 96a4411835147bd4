"""Embedder: many token sequences -> one pooled (or per-token) vector each, packed several
sequences to a batch (each its own seq_id, every token an output), t_embd pooled per sequence
over the whole decode (so a causal model's sequence may span ubatches; a non-causal one must
fit one ubatch: Context.decode's rule, checked here first with the numbers)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..batch import Batch
from ..context import Context
from .pooling import embd_normalize, pool, resolve_pooling


class EmbeddingError(ValueError):
    """Bad embedding input: the message names the numbers and the flag to change."""


@dataclass(slots=True)
class EmbedResult:
    """One sequence's embedding: [n_embd] pooled (rank: [n_cls_out]) or [n_tokens, n_embd]
    (pooling none), normalised as asked; n_tokens its length."""

    embedding: np.ndarray
    n_tokens: int


class Embedder:
    def __init__(self, ctx: Context, pooling: str | None = None, normalize: int = 2) -> None:
        self.ctx = ctx
        ctx.embeddings = True
        hp = ctx.model.hparams
        self.pooling = resolve_pooling(pooling, hp.pooling_type)
        self.normalize = normalize
        embd_normalize(np.zeros(1, dtype=np.float32), normalize)  # a bad value refused now
        self.head = getattr(ctx.model.net, "head", None)
        if self.pooling == "rank" and self.head is None:
            raise EmbeddingError(f"--pooling rank: the '{hp.arch}' model has no classifier head (cls / cls.output)")

    @property
    def max_tokens(self) -> int:
        """The most tokens one batch (and so one sequence) can hold: n_batch, and n_ubatch for a
        non-causal model, and the KV cells of a causal one."""
        c = self.ctx.cparams
        return min(c.n_batch, c.n_ubatch) if not c.causal_attn else min(c.n_batch, c.n_ctx_seq)

    def check(self, seqs: list[list[int]]) -> None:
        """EmbeddingError for an empty sequence or one longer than max_tokens (nothing run)."""
        c, limit = self.ctx.cparams, self.max_tokens
        pos = getattr(self.ctx.model.net, "pos_embd", None)  # learned absolute positions (bert): no more rows than these
        for i, s in enumerate(seqs):
            if not s:
                raise EmbeddingError(f"input {i} is empty: nothing to embed")
            if pos is not None and len(s) > pos.shape[0]:
                raise EmbeddingError(f"input {i} has {len(s)} tokens, more than the model's {pos.shape[0]} learned "
                                     f"positions (n_ctx_train): shorten the input")
            if len(s) > limit:
                if not c.causal_attn and len(s) > c.n_ubatch:
                    raise EmbeddingError(f"input {i} has {len(s)} tokens, more than n_ubatch (-ub {c.n_ubatch}): a "
                                         f"non-causal model needs each sequence in one ubatch; raise -ub and -b to at "
                                         f"least {len(s)}")
                raise EmbeddingError(f"input {i} has {len(s)} tokens, more than a batch holds ({limit}: -b {c.n_batch}, "
                                     f"-c {c.n_ctx}); raise -b (and -c)")

    def packs(self, seqs: list[list[int]]) -> list[list[int]]:
        """Indices of seqs grouped in order into batches of at most max_tokens tokens and
        n_seq_max sequences."""
        limit, n_seq = self.max_tokens, self.ctx.cparams.n_seq_max
        out: list[list[int]] = []
        cur: list[int] = []
        n = 0
        for i, s in enumerate(seqs):
            if cur and (n + len(s) > limit or len(cur) == n_seq):
                out.append(cur)
                cur, n = [], 0
            cur.append(i)
            n += len(s)
        if cur:
            out.append(cur)
        return out

    def embed_tokens(self, seqs: list[list[int]]) -> list[EmbedResult]:
        """Each sequence's embedding, in order.  The context's KV cache is cleared first
        (embedding sequences start at position 0 and share nothing)."""
        self.check(seqs)
        out: list[EmbedResult | None] = [None] * len(seqs)
        for pack in self.packs(seqs):
            for i, row in zip(pack, self.run_pack([seqs[i] for i in pack])):
                out[i] = EmbedResult(row, len(seqs[i]))
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def run_pack(self, seqs: list[list[int]]) -> list[np.ndarray]:
        """One decode of up to n_seq_max sequences (seq_id = their index): their embeddings."""
        ctx = self.ctx
        ctx.memory.clear()
        b = Batch()
        for s, toks in enumerate(seqs):
            for p, t in enumerate(toks):
                b.add(t, p, (s,), True)
        ctx.decode(b)
        rows = ctx.get_logits()  # [n_tokens, n_embd]: every token an output, in batch order
        out, r0 = [], 0
        for toks in seqs:
            v = pool(rows[r0 : r0 + len(toks)], self.pooling, self.head, ctx.cparams.causal_attn)
            r0 += len(toks)
            v = v.detach().to("cpu", torch.float32).numpy()
            out.append(v if self.pooling == "rank" else embd_normalize(v, self.normalize))
        ctx.memory.clear()
        return out
