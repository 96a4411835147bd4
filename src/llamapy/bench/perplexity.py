"""llama-perplexity's perplexity(): the whole text tokenized once (BOS as the vocab asks), cut
into chunks of n_ctx tokens; each chunk starts afresh with its first token replaced by BOS (when
the vocab adds BOS) and only its second half is scored (first = n_ctx/2), so every scored token
has at least n_ctx/2 tokens of context.  n_batch >= n_ctx runs n_seq = n_batch/n_ctx chunks per
decode as separate sequences; n_batch < n_ctx runs a chunk in several decodes."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..batch import Batch
from ..context import Context
from ..model.model import Model
from ..params import ContextParams


@dataclass(slots=True)
class PerplexityResult:
    ppl: float
    ppl_err: float  # llama.cpp's "+/-": standard error of the mean NLL, times ppl
    n_chunk: int
    count: int  # scored tokens
    nll: float  # sum of negative log-likelihoods
    nll2: float  # sum of their squares
    running: list[float] = field(default_factory=list)  # ppl after each chunk ([1], [2], ...)


def perplexity_layout(n_ctx: int, n_batch: int) -> tuple[int, int]:
    """(n_seq, n_batch used): llama-perplexity's main() sets n_parallel = max(1, n_batch/n_ctx),
    the context to n_parallel*n_ctx cells and n_batch to min(n_batch, that)."""
    if n_ctx <= 0:
        raise ValueError(f"perplexity needs -c > 0, got {n_ctx}")
    n_seq = max(1, n_batch // n_ctx)
    return n_seq, min(n_batch, n_seq * n_ctx)


def perplexity_params(n_ctx: int, n_batch: int, n_ubatch: int = 512, **kw) -> ContextParams:
    """The context llama-perplexity creates: n_seq streams of n_ctx cells each."""
    n_seq, n_batch = perplexity_layout(n_ctx, n_batch)
    return ContextParams(n_ctx=n_seq * n_ctx, n_batch=n_batch, n_ubatch=min(n_ubatch, n_batch), n_seq_max=n_seq, **kw)


def make_context(model: Model, n_ctx: int, n_batch: int, n_ubatch: int = 512, **kw) -> Context:
    """A Context with perplexity_params."""
    return Context(model, perplexity_params(n_ctx, n_batch, n_ubatch, **kw))


def nll_terms(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """-log softmax(logits)[target] per row, in float64: logits [n, n_vocab], targets [n]."""
    lp = torch.log_softmax(logits.to(torch.float64), dim=-1)  # [n, n_vocab]
    return -lp.gather(1, targets.view(-1, 1)).view(-1)


def perplexity(ctx: Context, tokens: list[int], n_ctx: int, n_chunks: int = -1,
               on_chunk: Callable[[int, float], None] | None = None,
               on_logits: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> PerplexityResult:
    """Score `tokens` (already tokenized with BOS handling) in chunks of n_ctx.  The context
    must come from make_context(model, n_ctx, n_batch).  Raises ValueError when the text has
    fewer than 2*n_ctx tokens (llama.cpp's limit).  on_logits(logits, targets), when given, sees
    every chunk's scored rows in chunk order, before on_chunk: logits [n_ctx-1-n_ctx/2, n_vocab]
    float32 and the ids they predict [n_ctx-1-n_ctx/2] (the KL-divergence mode, bench/kld.py)."""
    tok = ctx.model.tokenizer
    add_bos = bool(tok.add_bos and tok.bos is not None)
    if len(tokens) < 2 * n_ctx:
        raise ValueError(f"perplexity with -c {n_ctx} needs at least {2 * n_ctx} tokens, the text has {len(tokens)}")
    n_batch = ctx.cparams.n_batch
    n_seq = max(1, n_batch // n_ctx)
    if ctx.cparams.n_seq_max < n_seq:
        raise ValueError(f"-b {n_batch} / -c {n_ctx} runs {n_seq} sequences but the context has n_seq_max {ctx.cparams.n_seq_max}")
    n_chunk_max = len(tokens) // n_ctx
    n_chunk = n_chunk_max if n_chunks < 0 else min(n_chunks, n_chunk_max)
    num_batches = (n_ctx + n_batch - 1) // n_batch
    first = n_ctx // 2
    res = PerplexityResult(0.0, 0.0, n_chunk, 0, 0.0, 0.0)
    for i in range(0, n_chunk, n_seq):
        start = i * n_ctx
        n_seq_batch = min(n_seq, n_chunk - i)
        ctx.memory.clear(data=True)
        rows: list[list[torch.Tensor]] = [[] for _ in range(n_seq_batch)]  # scored logits per sequence
        for j in range(num_batches):
            batch_start = start + j * n_batch
            batch_size = min(start + n_ctx - batch_start, n_batch)
            batch = Batch()
            for seq in range(n_seq_batch):
                seq_start = batch_start + seq * n_ctx
                for k in range(batch_size):
                    t = tokens[seq_start + k]
                    if add_bos and j == 0 and k == 0:
                        t = tok.bos
                    pos = j * n_batch + k
                    batch.add(t, pos, (seq,), logits=pos >= first)
            ctx.decode(batch)
            logits = ctx.get_logits()  # [n_outputs, n_vocab], rows in slot order: seq-major
            n_out = logits.shape[0] // n_seq_batch if logits.shape[0] else 0
            for seq in range(n_seq_batch):
                if n_out:
                    rows[seq].append(logits[seq * n_out:(seq + 1) * n_out])
        for seq in range(n_seq_batch):
            lg = torch.cat(rows[seq])[: n_ctx - 1 - first]  # [n_ctx-1-first, n_vocab]
            s0 = start + seq * n_ctx + first
            targets = torch.tensor(tokens[s0 + 1:s0 + n_ctx - first], dtype=torch.long)
            if on_logits is not None:
                on_logits(lg, targets)
            v = nll_terms(lg, targets)
            res.nll += float(v.sum())
            res.nll2 += float((v * v).sum())
            res.count += n_ctx - first - 1
            res.running.append(math.exp(res.nll / res.count))
            if on_chunk is not None:
                on_chunk(i + seq + 1, res.running[-1])
    mean = res.nll / res.count
    var = res.nll2 / res.count - mean * mean
    res.ppl = math.exp(mean)
    res.ppl_err = math.sqrt(var / (res.count - 1)) * res.ppl if var > 0 else 0.0
    return res
