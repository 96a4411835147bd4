"""A draft model's cache follows the target's context shift (llama-server shifts ctx_dft with
the target's cache): DraftSimple.shift removes the discarded cells and moves the rest back, so
the draft holds the shifted sequence at positions 0..n-1 with the layer-0 K a fresh decode
computes there (deeper layers remember the dropped text, as the target's do), and its next
draft decodes only the new token instead of the whole sequence again."""
from __future__ import annotations

import torch
from test_ctx_shift import _layer0_k

from llamapy import Context, ContextParams
from llamapy.speculative.draft_simple import DraftSimple


def _draft(tiny) -> DraftSimple:
    params = ContextParams(n_ctx=128, n_batch=64, n_ubatch=64, n_seq_max=1, type_k="f32", type_v="f32", deterministic=True)
    return DraftSimple(Context(tiny, params))


def test_draft_cache_follows_context_shift(tiny):
    toks = [(7 * i + 3) % (tiny.n_vocab - 10) + 5 for i in range(40)]
    d = _draft(tiny)
    d.prefill(toks)
    n_keep, n_discard = 4, 10
    d.shift(n_keep, n_discard)
    kept = toks[:n_keep] + toks[n_keep + n_discard:]
    assert d.cached == kept
    decoded: list[int] = []
    real = d.ctx.decode
    d.ctx.decode = lambda b: (decoded.append(b.n_tokens), real(b))[1]
    new = kept + [11]
    d.prefill(new)  # what the next draft does first: the cache caught up with the sequence
    assert decoded == [1]  # the sampled token only (the shift itself is applied at this decode)
    pos, k = _layer0_k(d.ctx, 0)
    fresh = _draft(tiny)
    fresh.prefill(new)
    pos2, k2 = _layer0_k(fresh.ctx, 0)
    assert pos.tolist() == pos2.tolist() == list(range(len(new)))
    torch.testing.assert_close(k, k2, rtol=1e-4, atol=1e-4)
    assert len(d.draft(new + [12], 3)) == 3
