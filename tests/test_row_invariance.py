"""A row's logits do not depend on the ubatch it is decoded in (the fused layers, kernels/c/layers.c):
SmolLM2's continuation of a prompt, teacher-forced, one token a step against 2, 3, 4 and 7 tokens
a step (a speculative verification's shape), at one and two threads, at the AVX2 level: torch.equal
at 2-4 rows (where every product reads x as at one row: row1_x86.h lp_row1_i8, test_row_counts_i8.py),
and at 7 within 5e-6 of the largest logit with the same argmax (the tied Q8_0 output's int16 lanes
from 5 rows sum in another float order: 1.8e-5 of a logit; the layers' Q4_1 rows are still exact,
or the int8 rounding would carry a difference to tenths, as below).  What this pins beyond the products: each row's attention is split into
the chunks it has alone (attn.c lp_attn_chunks of that row), not a count that depends on how many
rows share the call; with the count of the call, a one-row step merged two chunks where a 2-row
step took one, and SmolLM2's int8 rounding carried the float-order difference to 0.3 of a logit
(the speculative test's one-thread divergence, 2026-12-07).  Skipped where the CPU has no AVX2."""
from __future__ import annotations

import pytest
import torch

from llamapy import Batch, Context, ContextParams
from llamapy.model.model import Model
from test_deterministic_avx2 import avx2  # noqa: F401  (the module's AVX2 kernels)

TEXT = ("# utils.py\ndef add_all(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n\n"
        "# utils_v2.py (same as utils.py, with a docstring and a loop over pairs)\ndef add_all(xs):\n"
        "    \"\"\"Sum xs.\"\"\"\n    total = 0\n    for a, b in zip(xs, xs[1:]):\n        total += a * b\n"
        "    return total\n")


def _logits(model: Model, ids: list[int], n_prompt: int, step: int) -> dict[int, torch.Tensor]:
    """ids[:n_prompt] in one ubatch, then the rest `step` tokens a decode, logits on every row."""
    ctx = Context(model, ContextParams(n_ctx=512, n_ubatch=512, n_batch=512))
    b = Batch()
    for i in range(n_prompt):
        b.add(ids[i], i, (0,), logits=False)
    ctx.decode(b)
    out = {}
    for p0 in range(n_prompt, len(ids), step):
        b = Batch()
        chunk = ids[p0 : p0 + step]
        for i, t in enumerate(chunk):
            b.add(t, p0 + i, (0,), logits=True)
        ctx.decode(b)
        for i in range(len(chunk)):
            out[p0 + i] = ctx.get_logits_ith(i).clone()
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_is_its_one_row_step(avx2, smollm2_path, threads):  # noqa: F811
    model = Model.load(smollm2_path)
    ids = model.tokenize(TEXT, add_special=True, parse_special=True)
    n_prompt = 60  # the steps' rows see 60..len(ids) cells: across 64 and 96 (LP_ATTN_CHUNK's steps)
    assert len(ids) > 97
    keep = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        calls = model.net.fused.calls
        alone = _logits(model, ids, n_prompt, 1)
        assert model.net.fused.calls > calls  # the fused layers ran the steps
        for step in (2, 3, 4, 7):
            got = _logits(model, ids, n_prompt, step)
            if step <= 4:
                bad = [p for p in alone if not torch.equal(got[p], alone[p])]
            else:
                bad = [p for p in alone if (got[p] - alone[p]).abs().max() > 5e-6 * alone[p].abs().max()
                       or got[p].argmax() != alone[p].argmax()]
            worst = max(((got[p] - alone[p]).abs().max().item() for p in bad), default=0.0)
            assert not bad, f"{step} rows a step, {threads} threads: positions {bad[:5]} differ (max {worst:.3g})"
    finally:
        torch.set_num_threads(keep)
