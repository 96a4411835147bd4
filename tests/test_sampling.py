"""sampling.py: llama.cpp's chain (penalties -> top_k -> top_p -> min_p -> temp -> dist)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from llamapy.sampling import (
    LLAMA_DEFAULT_SEED,
    Sampler,
    SamplingParams,
    TokenDataArray,
    apply_penalties,
    min_p,
    token_probabilities,
    top_k,
    top_p,
)

NO_TRUNC = dict(top_k=0, top_p=1.0, min_p=0.0)


def cand(logits: list[float] | torch.Tensor) -> TokenDataArray:
    x = torch.as_tensor(logits, dtype=torch.float32)
    return TokenDataArray(torch.arange(x.shape[0]), x.clone())


def kept(cur: TokenDataArray) -> set[int]:
    return set(cur.ids.tolist())


def test_defaults_are_llama_cpp_common_params_sampling():
    p = SamplingParams()
    assert (p.seed, p.top_k, p.top_p, p.min_p, p.temp) == (0xFFFFFFFF, 40, 0.95, 0.05, 0.80)
    penalties = (p.penalty_last_n, p.penalty_repeat, p.penalty_freq, p.penalty_present)
    assert penalties == (64, 1.0, 0.0, 0.0)
    assert not p.penalties_enabled()
    with pytest.raises(ValueError, match=r"penalty_last_n \(-2\)"):
        SamplingParams(penalty_last_n=-2)


def test_greedy_picks_argmax_first_of_ties():
    g = torch.Generator().manual_seed(0)
    for seed in range(20):
        logits = torch.randn(1000, generator=g)
        assert Sampler(SamplingParams(temp=0.0, seed=seed)).sample(logits) == int(logits.argmax())
    tied = torch.tensor([0.0, 3.0, 1.0, 3.0])
    assert Sampler(SamplingParams(temp=-1.0)).sample(tied) == 1


def test_top_k_1_equals_greedy():
    g = torch.Generator().manual_seed(1)
    for seed in range(20):
        logits = torch.randn(5000, generator=g) * 0.1  # flat: truncation matters
        s = Sampler(SamplingParams(top_k=1, top_p=1.0, min_p=0.0, temp=1.5, seed=seed))
        assert s.sample(logits) == int(logits.argmax())


def test_top_k_keeps_exactly_the_k_largest():
    logits = torch.tensor([0.1, 5.0, -2.0, 3.0, 4.0, 2.9])
    cur = cand(logits)
    top_k(cur, 3)
    assert cur.ids.tolist() == [1, 4, 3] and cur.sorted
    cur = cand(logits)
    top_k(cur, 0)  # disabled
    assert kept(cur) == set(range(6))
    cur = cand(logits)
    top_k(cur, 100)  # clamps to n
    assert kept(cur) == set(range(6))


def test_top_p_keeps_smallest_prefix_reaching_p():
    probs = [0.05, 0.5, 0.15, 0.3]  # sorted: 1 (0.5), 3 (0.3), 2 (0.15), 0 (0.05)
    logits = [math.log(x) for x in probs]
    for p, want in [(0.45, {1}), (0.75, {1, 3}), (0.9, {1, 3, 2}), (0.99, {0, 1, 2, 3})]:
        cur = cand(logits)
        top_p(cur, p)
        assert kept(cur) == want, p
    cur = cand(logits)
    top_p(cur, 0.45, min_keep=3)
    assert kept(cur) == {1, 3, 2}
    cur = cand(logits)
    top_p(cur, 1.0)
    assert kept(cur) == {0, 1, 2, 3} and not cur.sorted


def test_top_p_large_vocab_partial_and_full_sort():
    # > 1024 candidates, unsorted: mass inside the top 256 (partial sort suffices)
    g = torch.Generator().manual_seed(2)
    logits = torch.full((4000,), -20.0)
    hot = torch.randperm(4000, generator=g)[:3]
    logits[hot] = torch.tensor([math.log(0.6), math.log(0.3), math.log(0.09)])
    cur = cand(logits)
    top_p(cur, 0.85)
    assert cur.ids.tolist() == hot[:2].tolist()
    # flat: the top 256 cannot reach p, so everything is sorted; (i+1)/2000 >= 0.3001
    cur = cand(torch.zeros(2000))
    top_p(cur, 0.3001)
    assert cur.ids.shape[0] == 601


def test_min_p_keeps_tokens_above_fraction_of_max():
    logits = [-2.0, 0.0, -4.0, -1.0, -3.0]  # ln(0.2) = -1.61, ln(0.1) = -2.30
    for p, want in [(0.2, {1, 3}), (0.1, {1, 3, 0}), (1.0, {1}), (0.0, {0, 1, 2, 3, 4})]:
        cur = cand(logits)
        min_p(cur, p)
        assert kept(cur) == want, p
    cur = cand(logits)
    min_p(cur, 0.9, min_keep=4)
    assert kept(cur) == {1, 3, 0, 4}


def test_apply_penalties_llama_cpp_arithmetic():
    x = torch.tensor([2.0, -2.0, 1.0, 0.0, 3.0])
    apply_penalties(x, Counter({0: 2, 1: 1, 3: 1}), repeat=2.0, freq=0.25, present=0.5)
    # positive / repeat, non-positive * repeat, then - count*freq - present
    assert x.tolist() == [2 / 2 - 0.5 - 0.5, -4.0 - 0.25 - 0.5, 1.0, 0.0 - 0.25 - 0.5, 3.0]
    with pytest.raises(ValueError, match=r"token 9 is outside the vocabulary \(n_vocab 5\)"):
        apply_penalties(x, Counter({9: 1}), 1.1, 0.0, 0.0)


def test_masked_logits_stay_masked_and_the_chain_never_empties():
    # a repeat penalty that rounds to 0 in float32 (a fuzzed request's 8.7e-144) made a masked
    # logit -inf * 0 = NaN, min_p's maximum NaN, and the chain empty: a server error
    x = torch.tensor([1.0, float("-inf"), -1.0, 2.0])
    apply_penalties(x, Counter({1: 1, 2: 1, 3: 1}), repeat=8.720845667913865e-144, freq=0.5, present=0.5)
    assert x[1].item() == float("-inf") and not torch.isnan(x).any()
    cur = cand([float("nan")] * 3)
    min_p(cur, 0.05)
    assert cur.ids.shape[0] == 1  # at least one candidate, as llama.cpp keeps the first
    s = Sampler(SamplingParams(penalty_repeat=8.720845667913865e-144, temp=0.8, seed=3))
    for t in (1, 2, 3):
        s.accept(t)
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))
    logits[2] = float("-inf")
    assert {s.sample(logits) for _ in range(20)}.isdisjoint({2})


def greedy(**kw) -> Sampler:
    return Sampler(SamplingParams(temp=0.0, **kw))


def test_repeat_penalty_changes_argmax():
    logits = torch.tensor([2.0, 1.9, -5.0])
    s = greedy(penalty_repeat=1.1)
    assert s.sample(logits) == 0
    s.accept(0)
    assert s.sample(logits) == 1  # 2.0 / 1.1 = 1.82 < 1.9
    neg = torch.tensor([-0.5, -0.6, -9.0])
    s = greedy(penalty_repeat=1.5)
    s.accept(0)
    assert s.sample(neg) == 1  # -0.5 * 1.5 = -0.75; dividing would have raised it


def test_frequency_presence_and_window():
    logits = torch.tensor([1.0, 0.5, 0.0])
    s = greedy(penalty_freq=0.2)
    s.accept(0), s.accept(0)
    assert s.sample(logits) == 0  # 1.0 - 0.4 = 0.6 > 0.5
    s.accept(0)
    assert s.sample(logits) == 1  # 1.0 - 0.6 = 0.4 < 0.5
    s = greedy(penalty_present=0.6)
    s.accept(0), s.accept(0), s.accept(0)
    assert s.sample(logits) == 1  # presence counts once: 1.0 - 0.6
    s = greedy(penalty_present=0.6, penalty_last_n=2)
    s.accept(0), s.accept(2), s.accept(2)
    assert s.sample(logits) == 0  # token 0 left the 2-token window
    s = greedy(penalty_present=0.6, penalty_last_n=0)
    s.accept(0)
    assert s.sample(logits) == 0  # disabled
    s = Sampler(SamplingParams(temp=0.0, penalty_present=0.6, penalty_last_n=-1), n_ctx=3)
    for t in (0, 2, 2):
        s.accept(t)
    assert s.sample(logits) == 1  # -1 = n_ctx (3): token 0 still inside


def test_window_past_the_context_is_the_context():
    """repeat_last_n larger than the context (up to numbers no deque could hold: a fuzzed
    request sent 2**70) is the whole context, as -1 is."""
    logits = torch.tensor([1.0, 0.5, 0.0])
    for last_n in (4, 2**40, 2**70):
        s = Sampler(SamplingParams(temp=0.0, penalty_present=0.6, penalty_last_n=last_n), n_ctx=3)
        for t in (0, 2, 2, 2):
            s.accept(t)
        assert s.sample(logits) == 0  # the window holds the last 3 tokens: token 0 left it
    s = Sampler(SamplingParams(temp=0.0, penalty_present=0.6, penalty_last_n=2**70))  # no context given
    s.accept(0)
    assert s.sample(logits) == 1
    s.reset()
    assert s.sample(logits) == 0


def stream(s: Sampler, n: int = 64, n_vocab: int = 500) -> list[int]:
    g = torch.Generator().manual_seed(123)  # same logits for every sampler
    return [s.sample(torch.randn(n_vocab, generator=g)) for _ in range(n)]


def test_seeded_reproducibility():
    p = dict(top_k=0, top_p=1.0, min_p=0.0, temp=1.0)
    a = stream(Sampler(SamplingParams(seed=42, **p)))
    assert a == stream(Sampler(SamplingParams(seed=42, **p)))
    assert a != stream(Sampler(SamplingParams(seed=43, **p)))
    s = Sampler(SamplingParams(seed=42, **p))
    stream(s)
    s.reset()
    assert stream(s) == a, "reset() restarts the seeded stream"
    r1, r2 = Sampler(SamplingParams(**p)), Sampler(SamplingParams(**p))
    assert r1.seed != LLAMA_DEFAULT_SEED and stream(r1) != stream(r2)


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def draw(s: Sampler, logits: torch.Tensor, n: int) -> torch.Tensor:
    tokens = torch.tensor([s.sample(logits) for _ in range(n)])
    return torch.bincount(tokens, minlength=logits.shape[0]).double()


def test_temp_1_without_truncation_matches_softmax():
    logits = torch.tensor([1.0, 0.0, -0.5, 2.0, 0.3, -1.0, 1.2, 0.7])
    counts = draw(Sampler(SamplingParams(seed=7, temp=1.0, **NO_TRUNC)), logits, 6000)
    # df = 7: P(chi2 > 24.3) = 0.001; a wrong distribution (e.g. temp ignored) lands far above
    assert chi_square(counts, torch.softmax(logits.double(), 0)) < 24.3
    assert chi_square(counts, torch.softmax(logits.double() / 0.5, 0)) > 100


def test_full_chain_distribution():
    """Each stage removes something; what is left is softmax(l / temp) over the survivors."""
    logits = torch.tensor([0.0, 3.0, 2.5, 2.0, -1.0, 2.7, 1.0])
    params = SamplingParams(seed=11, top_k=5, top_p=0.9, min_p=0.4, temp=0.5)
    # top_k 5 drops 0, 4.  softmax over {1, 5, 2, 3, 6}: .351 .260 .213 .129 .047,
    # cumulative .351 .611 .824 .953: top_p 0.9 drops 6.  min_p 0.4: exp(2.0 - 3.0) = .37
    # drops 3, exp(2.5 - 3.0) = .61 keeps 2.  Survivors {1, 5, 2} at temperature 0.5.
    keep = torch.tensor([1, 5, 2])
    want = torch.softmax(logits[keep].double() / 0.5, 0)
    counts = draw(Sampler(params), logits, 4000)
    assert counts[[0, 4, 6, 3]].sum() == 0
    assert chi_square(counts[keep], want) < 13.8  # df 2, p = 0.001
    params.min_p = 0.3  # now token 3 (ratio .37) survives
    counts = draw(Sampler(params), logits, 1000)
    assert counts[3] > 0 and counts[6] == 0


def test_top_probs_after_chain():
    logits = torch.tensor([0.0, 3.0, 2.5, 2.0, -1.0])
    s = Sampler(SamplingParams(seed=3, top_k=2, top_p=1.0, min_p=0.0, temp=1.0, n_probs=5))
    tok = s.sample(logits)
    probs = s.top_probs()
    assert [t for t, _ in probs] == [1, 2] and tok in (1, 2)
    assert probs[0][1] == pytest.approx(1 / (1 + math.exp(-0.5)), rel=1e-6)
    assert sum(p for _, p in probs) == pytest.approx(1.0)
    g = Sampler(SamplingParams(temp=0.0))
    assert g.sample(logits) == 1 and g.top_probs(3) == [(1, 1.0)]
    pre = token_probabilities(logits, 2)
    assert [t for t, _ in pre] == [1, 2]
    assert pre[0][1] == pytest.approx(float(torch.softmax(logits, 0)[1]))


def test_post_sampling_probs_after_verify_are_the_chains():
    """After verify() rejects a draft, top_probs() / post_sampling_probs() still report the
    chain's distribution (the residual it drew from is internal), as after sample(); a token
    the chain dropped has probability 0."""
    logits = torch.tensor([0.0, 3.0, 2.5, 2.0, -1.0])
    params = SamplingParams(seed=11, top_k=3, top_p=1.0, min_p=0.0, temp=1.0)
    ref = Sampler(params)
    ref.sample(logits)
    want = ref.top_probs(5)
    rejected = 0
    s = Sampler(params)
    for _ in range(50):
        tok, ok = s.verify(logits, 3)  # p(3) ~ 0.19 among the three candidates: mostly rejected
        rejected += not ok
        got = s.top_probs(5)
        assert [t for t, _ in got] == [t for t, _ in want] and [p for _, p in got] == pytest.approx([p for _, p in want])
        prob, top = s.post_sampling_probs(tok, 2)
        assert prob == pytest.approx(dict(want)[tok]) and [t for t, _ in top] == [t for t, _ in want[:2]]
    assert rejected > 20
    assert s.post_sampling_probs(0, 5)[0] == 0.0  # token 0 is not among the candidates


def test_sample_leaves_input_alone_and_accepts_bf16():
    logits = torch.tensor([1.0, 2.0, 3.0, 0.5]).to(torch.bfloat16)
    before = logits.clone()
    s = Sampler(SamplingParams(temp=0.0, penalty_repeat=10.0))
    s.accept(2)
    assert s.sample(logits) == 1
    assert torch.equal(logits, before)
    with pytest.raises(ValueError, match=r"\[n_vocab\], got \(2, 4\)"):
        s.sample(torch.zeros(2, 4))


def test_fast_top_k_draws_what_the_torch_chain_draws():
    """The chain's top_k from the kernels (a contiguous float32 row) and from torch.topk (the
    same logits as float64, which the kernel does not take) leave the same candidates in the
    same order, so the same seeds draw the same tokens."""
    g = torch.Generator().manual_seed(5)
    for trial in range(6):
        x = torch.randn(5000, generator=g) * 3
        for params in (dict(), dict(top_k=7, top_p=1.0, min_p=0.0, temp=1.3), dict(top_k=300, top_p=0.99, min_p=0.0)):
            a = [Sampler(SamplingParams(seed=trial * 10 + i, **params)).sample(x) for i in range(8)]
            b = [Sampler(SamplingParams(seed=trial * 10 + i, **params)).sample(x.double()) for i in range(8)]
            assert a == b
