"""Speculative decoding in `run` (generate.py with a Speculator): drafts from an n-gram lookup
or a draft model, verified in one decode with logits on every row.  Greedy output is the
output without speculation; the rejection sampler's output distribution is the target's; the
caches hold, after rejections, the cells a run without speculation holds; bad settings fail
with errors naming the flag."""
from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from llamapy import Batch, Context, ContextParams
from llamapy.generate import GenTimings, generate
from llamapy.model.model import Model
from llamapy.registry import ModelNotFoundError
from llamapy.sampling import Sampler, SamplingParams
from llamapy.speculative import SpecParams, Speculator, make_speculator
from llamapy.speculative.draft_simple import VocabMismatchError
from llamapy.speculative.ngram_simple import NgramSimple

PROMPTS = {
    "code edit": "# utils.py\ndef add_all(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n\n"
                 "\n# utils_v2.py (same as utils.py, with a docstring)\ndef add_all(xs):\n    \"\"\"Sum xs.\"\"\"\n    total = 0\n",
    "prose": "The history of the bicycle begins in the early nineteenth century, when",
    "question over a passage": "Passage: The Nile flows north through eleven countries and empties into "
                               "the Mediterranean Sea. Question: Into which sea does the Nile empty? Answer:",
}


def _gen(model: Model, prompt: str, n: int, spec: SpecParams | None, ub: int = 512, temp: float = 0.0,
         seed: int = 7) -> tuple[list[int], Context, Speculator | None]:
    cp = ContextParams(n_ctx=1024, n_ubatch=ub, n_batch=512)
    ctx = Context(model, cp)
    sp = make_speculator(spec, model, cp) if spec is not None else None
    sampler = Sampler(SamplingParams(temp=temp, seed=seed))
    ids = model.tokenize(prompt, add_special=True, parse_special=True)
    return list(generate(ctx, sampler, ids, n, spec=sp)), ctx, sp


@pytest.mark.parametrize("ub", [512, 4])
@pytest.mark.parametrize("kind", list(PROMPTS))
def test_greedy_output_unchanged_ngram(smollm2, kind, ub):
    """ngram-simple (short n-grams so that drafts happen): the same tokens, drafts verified."""
    plain, _, _ = _gen(smollm2, PROMPTS[kind], 40, None, ub)
    spec = SpecParams(type="ngram-simple", ngram_size_n=2, ngram_size_m=6)
    out, ctx, sp = _gen(smollm2, PROMPTS[kind], 40, spec, ub)
    assert out == plain
    if kind == "code edit":
        assert sp.n_accepted > 0  # the repeated function is drafted from the prompt


@pytest.mark.parametrize("ub", [512, 4])
def test_greedy_output_unchanged_draft_model(smollm2_path, smollm2, ub):
    """draft-simple with a draft model sharing the vocabulary (the same file, loaded again):
    the same tokens; drafts that agree are accepted, and the draft cache follows."""
    spec = SpecParams(type="draft-simple", draft_model=str(smollm2_path), n_max=4)
    for kind in ("code edit", "prose"):
        plain, _, _ = _gen(smollm2, PROMPTS[kind], 32, None, ub)
        out, ctx, sp = _gen(smollm2, PROMPTS[kind], 32, spec, ub)
        assert out == plain
        assert sp.n_drafted > 0 and sp.n_accepted > 0


def _cells(ctx: Context) -> list[tuple[int, tuple[int, ...]]]:
    """Every used cell's (position, sequences), in position order."""
    out = []
    for c in ctx.memory.cells:
        used = np.flatnonzero(c.pos >= 0)
        out += [(int(c.pos[i]), tuple(np.flatnonzero(c.seq[i]).tolist())) for i in used]
    return sorted(out)


class FixedDraft:
    """A draft source that always proposes the same tokens (a deterministic proposer: the
    rejection sampler's assumption), so every step verifies and most drafts are rejected."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def draft(self, tokens: list[int], n_max: int) -> list[int]:
        return self.tokens[:n_max]

    def accepted(self, tokens: list[int]) -> None:
        pass


def test_cache_after_rejections_is_the_plain_runs(smollm2_path, smollm2):
    """After rejected drafts (and a stop right after accepted ones) the target cache holds the
    cells of a run without speculation, and the draft model's cache the accepted sequence."""
    prompt = PROMPTS["prose"]
    for n in (17, 24):
        plain, ctx0, _ = _gen(smollm2, prompt, n, None)
        ctx1 = Context(smollm2, ContextParams(n_ctx=1024))
        sp = Speculator(FixedDraft([plain[3], 11, 12, 13]), 4)
        ids = smollm2.tokenize(prompt, add_special=True, parse_special=True)
        out = list(generate(ctx1, Sampler(SamplingParams(temp=0.0)), ids, n, spec=sp))
        assert out == plain and sp.n_drafted > 0
        assert _cells(ctx1) == _cells(ctx0)
    spec = SpecParams(type="draft-simple", draft_model=str(smollm2_path), n_max=5)
    out, ctx2, sp = _gen(smollm2, PROMPTS["code edit"], 20, spec)
    _, ctx0, _ = _gen(smollm2, PROMPTS["code edit"], 20, None)
    assert _cells(ctx2) == _cells(ctx0)
    d = sp.proposer
    ids = smollm2.tokenize(PROMPTS["code edit"], add_special=True, parse_special=True)
    assert d.cached == (ids + out)[: len(d.cached)]  # only accepted tokens are in the draft cache
    assert d.ctx.memory.seq_pos_max(0) == len(d.cached) - 1 and d.ctx.memory.n_used() == len(d.cached)


def test_verification_ubatches(tiny):
    """-ub 4: the sampled token and a 5-token draft are 6 rows, two ubatches per verification."""
    for ub, per in ((4, 2), (512, 1)):
        ctx = Context(tiny, ContextParams(n_ctx=256, n_ubatch=ub, n_batch=64))
        sp = Speculator(FixedDraft([5, 6, 7, 8, 9]), 5, backoff=None)
        tm = GenTimings()
        list(generate(ctx, Sampler(SamplingParams(temp=0.0)), [1, 2, 3], 6, timings=tm, spec=sp))
        assert tm.n_verify == sp.n_verifications >= 1
        first = ctx.stats.ubatches_per_decode[1]  # after the prompt's own decode: 1 + 5 rows
        assert first == per and tm.n_verify_ubatches >= per


def _chi2_ok(counts: dict[int, int], probs: dict[int, float], n: int) -> tuple[float, float]:
    """(chi-square statistic, a 6-sigma bound for its degrees of freedom); categories with an
    expected count under 5 are pooled."""
    stat, df, pool_o, pool_e = 0.0, -1, 0, 0.0
    for t, p in probs.items():
        e, o = p * n, counts.get(t, 0)
        if e < 5:
            pool_o, pool_e = pool_o + o, pool_e + e
            continue
        stat += (o - e) ** 2 / e
        df += 1
    if pool_e > 0:
        stat += (pool_o - pool_e) ** 2 / pool_e
        df += 1
    assert set(counts) <= set(probs)  # nothing outside the chain's candidates
    return stat, df + 6 * math.sqrt(2 * max(df, 1))


@pytest.mark.parametrize("chain", ["full softmax", "default chain"])
def test_rejection_sampler_is_exact(tiny, chain):
    """The token after a drafted position, over 4000 seeded verifications, follows the target's
    own distribution (chi-square), whether the draft is its likeliest token or a rare one."""
    ctx = Context(tiny, ContextParams(n_ctx=64))
    b = Batch()
    for i, t in enumerate([1, 5, 9, 17, 33]):
        b.add(t, i, (0,), logits=i == 4)
    ctx.decode(b)
    logits = ctx.get_logits_ith(-1) * 0.05  # flatten it: many tokens with real probability
    params = SamplingParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.0) if chain == "full softmax" else \
        SamplingParams(temp=0.8)
    ref = Sampler(replace(params, seed=1))
    ref.sample(logits)
    probs = dict(zip(ref.cur.ids.tolist(), ref.cur.probs.double().tolist()))
    order = sorted(probs, key=probs.get, reverse=True)
    n = 4000
    for draft in (order[0], order[len(order) // 2]):
        s = Sampler(replace(params, seed=1234))
        counts: dict[int, int] = {}
        acc = 0
        for _ in range(n):
            t, ok = s.verify(logits, draft)
            assert ok == (t == draft)
            counts[t] = counts.get(t, 0) + 1
            acc += ok
        stat, bound = _chi2_ok(counts, probs, n)
        assert stat < bound, (draft, stat, bound)
        assert abs(acc / n - probs[draft]) < 5 * math.sqrt(probs[draft] * (1 - probs[draft]) / n) + 1e-3


def test_sampled_output_with_drafts_runs(tiny):
    """Under temperature, drafts are verified by rejection sampling inside generate: it runs
    to the requested length and accepts some drafts of the model's own likeliest tokens."""
    ctx = Context(tiny, ContextParams(n_ctx=256))
    sp = Speculator(NgramSimple(1, 4), 4)
    tm = GenTimings()
    out = list(generate(ctx, Sampler(SamplingParams(temp=0.7, seed=3)), [1, 2, 3, 1, 2, 3, 1, 2], 40, timings=tm,
                        spec=sp))
    assert sp.n_verifications > 0
    # the cache holds the prompt and every emitted token but the last (an end-of-generation
    # token is not emitted, and not decoded)
    assert ctx.memory.seq_pos_max(0) == 8 + len(out) - (2 if tm.stop == "length" else 1)
    assert tm.stop == "eog" or len(out) == 40


def test_ngram_simple_lookup():
    """llama.cpp's rules: the latest match of the last size_n tokens (ending with the sampled
    one), then the tokens after it, at most size_m and n_max; nothing for short sequences."""
    ng = NgramSimple(size_n=2, size_m=3)
    seq = [9, 1, 2, 3, 4, 5, 8, 1, 2, 7, 7, 6, 1]
    assert ng.draft(seq + [2], 10) == [7, 7, 6]  # "1 2" last seen at 7..8, followed by 7 7 6
    assert ng.draft(seq + [2], 2) == [7, 7]
    assert ng.draft(seq + [4], 10) == []  # "1 4" never seen
    assert ng.draft([1, 2, 1, 2], 10) == []  # shorter than size_n + size_m + 2


def test_bad_settings_are_clear(tiny_path, smollm2, tmp_path):
    with pytest.raises(ValueError, match="--spec-draft-n-max -1"):
        SpecParams(type="draft-simple", draft_model="x", n_max=-1)
    with pytest.raises(ValueError, match="--spec-type 'eagle'"):
        SpecParams(type="eagle")
    with pytest.raises(ValueError, match="needs a draft model"):
        SpecParams(type="draft-simple")
    with pytest.raises(VocabMismatchError, match=f"{Model.load(tiny_path).n_vocab} tokens.*{smollm2.n_vocab}"):
        make_speculator(SpecParams(type="draft-simple", draft_model=str(tiny_path)), smollm2)
    with pytest.raises(ModelNotFoundError, match="no-such-draft"):
        make_speculator(SpecParams(type="draft-simple", draft_model=str(tmp_path / "no-such-draft.gguf")), smollm2)
    r = subprocess.run([sys.executable, "-m", "llamapy", "run", "-m", str(tiny_path), "--spec-type", "draft-simple",
                        "-md", str(tiny_path), "--spec-draft-n-max", "-1", "-n", "2"], capture_output=True, text=True)
    assert r.returncode == 1 and "--spec-draft-n-max -1: must be >= 0" in r.stderr


def test_drafting_backs_off_while_missing(tiny):
    """A draft source that always misses is asked less and less often, for shorter drafts
    (the output is the plain run's all the same)."""
    prompt = [1, 2, 3, 4]
    plain = list(generate(Context(tiny, ContextParams(n_ctx=256)), Sampler(SamplingParams(temp=0.0)), prompt, 48))
    miss = [t for t in range(tiny.n_vocab) if t not in plain][:3]
    sp = Speculator(FixedDraft(miss), 3)
    out = list(generate(Context(tiny, ContextParams(n_ctx=256)), Sampler(SamplingParams(temp=0.0)), prompt, 48, spec=sp))
    assert out == plain and sp.n_accepted == 0
    assert 4 <= sp.n_verifications <= 16  # 2 misses, skip 1; 2 misses, skip 2, 4, 8, 16 ...
    assert sp.n_drafted == 2 * sp.n_verifications  # 2 tokens a draft: the start's length, and after a miss


def test_draft_length_follows_acceptance():
    """Whole drafts accepted: the next is twice as long (up to n_max); a partial one: twice
    what was accepted."""
    from llamapy.speculative.proposer import Backoff

    b = Backoff(start=4)
    assert b.length(48) == 4
    b.record(4, 4)
    assert b.length(48) == 8
    b.record(8, 8)
    assert b.length(48) == 16 and b.length(10) == 10
    b.record(16, 3)
    assert b.length(48) == 6


def test_drafts_start_short():
    """A fresh draft source is asked for 2 tokens first (a miss then costs a 3-row decode, not
    a 9-row one), then 4, 8, 16, 32 while every draft is accepted whole."""
    from llamapy.speculative.proposer import Backoff

    b, lengths = Backoff(), []
    for _ in range(6):
        n = b.length(48)
        lengths.append(n)
        b.record(n, n)
    assert lengths == [2, 4, 8, 16, 32, 48]


def test_n_predict_zero_generates_nothing(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=64))
    tm = GenTimings()
    assert list(generate(ctx, Sampler(SamplingParams(temp=0.0)), [1, 2, 3], 0, timings=tm)) == []
    assert tm.stop == "length" and ctx.memory.seq_pos_max(0) == 2
