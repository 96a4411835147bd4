"""Embedding requests in the scheduler thread: an EmbedJob holds one request's token
sequences; run_jobs embeds the sequences of every waiting job together (Embedder packs them
many to a batch, each its own sequence), then hands each job its vectors, normalised as the
request asked (llama-server: only pooled embeddings are normalised)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from ..embed import Embedder, embd_normalize


@dataclass(slots=True)
class EmbedJob:
    """seqs: the request's token sequences; normalize: its embd_normalize.  done(result) is
    called in the scheduler thread with a list of (vectors [n, n_embd] or [n_embd], n_tokens)
    per sequence, or an Exception."""

    seqs: list[list[int]]
    normalize: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future = field(repr=False)

    def done(self, result) -> None:
        def put() -> None:
            if not self.future.done():
                (self.future.set_exception if isinstance(result, Exception) else self.future.set_result)(result)

        self.loop.call_soon_threadsafe(put)


def run_jobs(embedder: Embedder, jobs: list[EmbedJob]) -> int:
    """Embed every job's sequences in shared batches; returns the tokens embedded.  A job whose
    input cannot run (too long, empty) gets its error alone, the others still run."""
    ok: list[EmbedJob] = []
    for j in jobs:
        try:
            embedder.check(j.seqs)
            ok.append(j)
        except ValueError as e:
            j.done(e)
    seqs = [s for j in ok for s in j.seqs]
    if not seqs:
        return 0
    try:
        res = embedder.embed_tokens(seqs)
    except Exception as e:  # noqa: BLE001 - every job of the batch learns of it
        for j in ok:
            j.done(e)
        return 0
    i = 0
    pooled = embedder.pooling not in ("none", "rank")
    for j in ok:
        out = []
        for r in res[i : i + len(j.seqs)]:
            v = embd_normalize(r.embedding, j.normalize) if pooled else np.asarray(r.embedding, dtype=np.float32)
            out.append((v, r.n_tokens))
        i += len(j.seqs)
        j.done(out)
    return len(seqs) and sum(len(s) for s in seqs)
