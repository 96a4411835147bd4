"""Phi-3's LongRoPE beyond the logits against llama.cpp (test_families.py's phi3-longrope
cases): the long or short factors are the context's choice (n_ctx_seq against
rope.scaling.original_context_length), one model serving contexts of either kind, and a K-shift
re-rotates K with the factors its context's forward passes used."""
from __future__ import annotations

import pytest
import torch

from llamapy import Context, ContextParams, Model
from test_context import TOL, decode_seq, rand_tokens
from tiny_family import F16, LONGROPE_FACTORS, write_tiny_family


@pytest.fixture(scope="module")
def phi3_lr(tmp_path_factory) -> Model:
    """LongRoPE factors, an original context of 256 cells, no attention factor (so a K-shift
    composes exactly: llama.cpp's shift applies the factor again, as llamapy's does)."""
    path = tmp_path_factory.mktemp("lr") / "phi3-lr.gguf"
    write_tiny_family(path, "phi3", F16, longrope=True, extra_keys={"rope.scaling.original_context_length": 256})
    return Model.load(path)


def test_factor_set_per_context(phi3_lr):
    net = phi3_lr.net
    assert net.rope_for_ctx(256).freq_factors == pytest.approx(LONGROPE_FACTORS["short"])
    assert net.rope_for_ctx(512).freq_factors == pytest.approx(LONGROPE_FACTORS["long"])
    toks = rand_tokens(40, phi3_lr.n_vocab, 3)
    short = decode_seq(Context(phi3_lr, ContextParams(n_ctx=256)), toks, 0)
    long = decode_seq(Context(phi3_lr, ContextParams(n_ctx=512)), toks, 0)
    long_np2 = decode_seq(Context(phi3_lr, ContextParams(n_ctx=512, n_seq_max=2)), toks, 0)  # 256 cells a sequence
    assert (short - long).abs().max() > 1.0
    torch.testing.assert_close(long_np2, short, atol=TOL, rtol=0)


@pytest.mark.parametrize("n_ctx", [256, 512])
def test_seq_add_rerotates_with_the_context_factors(phi3_lr, n_ctx):
    """Tokens decoded at 100.. and shifted to 0.. continue as tokens decoded at 0.., with the
    short (256 cells) or the long (512) factors."""
    toks, nxt = rand_tokens(12, phi3_lr.n_vocab, 11), rand_tokens(3, phi3_lr.n_vocab, 12)
    f32 = dict(n_ctx=n_ctx, type_k="f32", type_v="f32")
    a = Context(phi3_lr, ContextParams(**f32))
    decode_seq(a, toks, 0, pos0=100)
    a.memory.seq_add(0, -1, -1, -100)
    shifted = decode_seq(a, nxt, 0, pos0=12)
    b = Context(phi3_lr, ContextParams(**f32))
    decode_seq(b, toks, 0)
    direct = decode_seq(b, nxt, 0, pos0=12)
    torch.testing.assert_close(shifted, direct, atol=TOL, rtol=0)
