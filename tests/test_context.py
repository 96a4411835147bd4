"""Context.decode(): split counts, clamps, errors that change nothing, outputs, n_kv padding,
and the engine's central invariant (a sequence's logits do not depend on its neighbours)."""
from __future__ import annotations

import logging
import random

import numpy as np
import pytest
import torch

import llamapy
from llamapy import Batch, BatchError, Context, ContextParams, KVCacheFullError

# fp32 forward; only GEMM and attention blocking differ between batch shapes (a dense mask
# over n_kv cells, or the visible cells gathered per sequence).  The tiny random model
# amplifies rounding: scaling layer 0's attention output by (1 + 1e-6) moves its logits
# (~30) by 5e-4.  A leak across sequences moves them by O(1).  5e-3 on CPU and CUDA alike.
TOL = 5e-3


def decode_seq(ctx: Context, tokens: list[int], seq: int, pos0: int = 0) -> torch.Tensor:
    b = Batch()
    for i, t in enumerate(tokens):
        b.add(t, pos0 + i, [seq], logits=True)
    ctx.decode(b)
    return ctx.get_logits().clone()


def cells_state(ctx: Context):
    return [(c.pos.copy(), c.seq.copy()) for c in ctx.memory.cells]


def rand_tokens(n: int, n_vocab: int, seed: int) -> list[int]:
    return random.Random(seed).choices(range(n_vocab), k=n)


# --- the split ----------------------------------------------------------------------------------
def test_5000_token_prompt_is_3_decodes_10_ubatches(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=8192))
    assert (ctx.cparams.n_batch, ctx.cparams.n_ubatch) == (2048, 512)
    toks = rand_tokens(5000, tiny.n_vocab, 1)
    for i in range(0, 5000, ctx.cparams.n_batch):
        b = Batch()
        for j, t in enumerate(toks[i : i + 2048]):
            b.add(t, i + j, [0], logits=(i + j == 4999))
        ctx.decode(b)
    assert ctx.stats.n_decode_calls == 3
    assert ctx.stats.n_ubatches == 10
    assert ctx.stats.ubatches_per_decode == [4, 4, 2]
    assert ctx.memory.seq_pos_max(0) == 4999


@pytest.mark.parametrize("n_ubatch,expected", [(512, 1), (64, 4), (100, 3)])
def test_ubatch_count_follows_n_ubatch(tiny, n_ubatch, expected):
    ctx = Context(tiny, ContextParams(n_ctx=1024, n_ubatch=n_ubatch))
    decode_seq(ctx, rand_tokens(256, tiny.n_vocab, 2), 0)
    assert ctx.stats.n_ubatches == expected


# --- clamps --------------------------------------------------------------------------------------
def test_clamps_are_llamacpp_and_logged(tiny, caplog):
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        ctx = Context(tiny, ContextParams(n_ctx=1000, n_batch=2048, n_ubatch=512))
    c = ctx.cparams
    assert c.n_ctx == 1024  # padded up to 256
    assert c.n_batch == 1024  # min(n_ctx, n_batch)
    assert c.n_ubatch == 512
    text = caplog.text
    assert "1000" in text and "1024" in text
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        caplog.clear()
        ctx = Context(tiny, ContextParams(n_ctx=1024, n_batch=64, n_ubatch=512))
    assert ctx.cparams.n_ubatch == 64
    assert "-b 64 < -ub 512: micro-batch clamped to 64" in caplog.text


@pytest.mark.parametrize("n_ctx, n_seq, unified, want_ctx, want_seq", [
    (1024, 8, False, 2048, 256),  # 128 a stream, padded to 256 (llama_context: GGML_PAD(n_ctx / n_seq_max, 256))
    (4096, 3, False, 4608, 1536),  # 1365 -> 1536
    (8192, 8, False, 8192, 1024),  # already a multiple: unchanged
    (1024, 8, True, 1024, 1024),  # unified: one stream of n_ctx
])
def test_streams_hold_multiples_of_256_cells(tiny, caplog, n_ctx, n_seq, unified, want_ctx, want_seq):
    """Without --kv-unified each sequence's stream is n_ctx / n_seq_max padded to 256, and n_ctx
    follows (llama.cpp: -c 1024 -np 8 gives n_ctx 2048, n_ctx_seq 256), with a warning."""
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        ctx = Context(tiny, ContextParams(n_ctx=n_ctx, n_seq_max=n_seq, kv_unified=unified))
    assert (ctx.cparams.n_ctx, ctx.n_ctx_seq) == (want_ctx, want_seq)
    assert (f"n_ctx set to {want_ctx}" in caplog.text) == (want_ctx != n_ctx)


def test_n_ctx_zero_means_trained_context(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=0))
    assert ctx.n_ctx == tiny.hparams.n_ctx_train


def test_kv_size_line(tiny, caplog):
    with caplog.at_level(logging.INFO, logger="llamapy"):
        Context(tiny, ContextParams(n_ctx=512))
    hp = tiny.hparams
    mib = 512 * hp.n_layer * hp.n_embd_k_gqa() * 2 / 2**20
    assert f"size = {2 * mib:7.2f} MiB (   512 cells,   2 layers,  1/1 seqs), K (f16): {mib:7.2f} MiB, V (f16): {mib:7.2f} MiB" in caplog.text


# --- errors leave everything unchanged -------------------------------------------------------
def _bad_batches(n_vocab: int) -> list[tuple[Batch, str]]:
    out = []
    b = Batch()
    for i in range(300):
        b.add(1, 10 + i, [0])
    out.append((b, "n_tokens (300) > n_batch (256)"))
    b = Batch()
    b.add(1, 10, [5])
    out.append((b, "n_seq_max"))
    b = Batch()
    b.add(1, 42, [0], logits=True)
    out.append((b, "9"))  # memory's last position of seq 0 is 9; 42 does not continue it
    out.append((Batch(), "empty"))
    b = Batch()
    b.add(n_vocab + 5, 10, [0])
    out.append((b, str(n_vocab)))
    return out


def test_rejected_batches_change_nothing(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=512, n_batch=256, n_seq_max=2, kv_unified=True))
    prompt = rand_tokens(10, tiny.n_vocab, 3)
    before_logits = decode_seq(ctx, prompt, 0)
    before = cells_state(ctx)
    stats = (ctx.stats.n_decode_calls, ctx.stats.n_ubatches)
    for bad, needle in _bad_batches(tiny.n_vocab):
        with pytest.raises(BatchError) as e:
            ctx.decode(bad)
        assert needle in str(e.value), str(e.value)
        after = cells_state(ctx)
        assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(before, after))
        assert torch.equal(ctx.get_logits(), before_logits)
        assert (ctx.stats.n_decode_calls, ctx.stats.n_ubatches) == stats
    assert isinstance(BatchError("x"), ValueError)


def test_full_cache_is_refused_before_any_change(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=256, n_batch=256, n_ubatch=64))
    decode_seq(ctx, rand_tokens(200, tiny.n_vocab, 4), 0)
    before = cells_state(ctx)
    b = Batch()
    for i in range(100):  # two ubatches: the first fits, the second does not
        b.add(5, 200 + i, [0])
    with pytest.raises(KVCacheFullError) as e:
        ctx.decode(b)
    assert "56 of 256 free" in str(e.value) and "-c" in str(e.value)
    assert all((a[0] == b_[0]).all() for a, b_ in zip(before, cells_state(ctx)))


# --- outputs ----------------------------------------------------------------------------------------
def test_logits_only_for_flagged_slots_by_batch_index(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=512))
    toks = rand_tokens(8, tiny.n_vocab, 5)
    b = Batch()
    for i, t in enumerate(toks):
        b.add(t, i, [0], logits=i in (2, 7))
    ctx.decode(b)
    assert ctx.get_logits().shape == (2, tiny.n_vocab)
    assert torch.equal(ctx.get_logits_ith(2), ctx.get_logits()[0])
    assert torch.equal(ctx.get_logits_ith(7), ctx.get_logits_ith(-1))
    assert torch.equal(ctx.get_logits_ith(2), ctx.get_logits_ith(-2))
    with pytest.raises(IndexError, match="did not ask for logits"):
        ctx.get_logits_ith(3)
    full = Context(tiny, ContextParams(n_ctx=512))
    all_logits = decode_seq(full, toks, 0)
    assert torch.allclose(ctx.get_logits_ith(2), all_logits[2], atol=TOL)


def test_reused_logits_buffer(tiny):
    """reuse_logits (the server's): every decode step writes its logits into the same buffer,
    equal to a fresh tensor's, and get_logits() holds until the next decode."""
    toks = rand_tokens(12, tiny.n_vocab, 6)
    fresh, reused = Context(tiny, ContextParams(n_ctx=512)), Context(tiny, ContextParams(n_ctx=512))
    reused.reuse_logits = True
    ptrs = []
    for n, pos0 in ((3, 0), (2, 3), (3, 5), (1, 8)):  # a step of 3 rows, then fewer: views of one buffer
        a, b = decode_seq(fresh, toks[pos0:pos0 + n], 0, pos0), decode_seq(reused, toks[pos0:pos0 + n], 0, pos0)
        assert torch.equal(a, b)
        ptrs.append(reused.get_logits().data_ptr())
        assert fresh.get_logits().data_ptr() not in ptrs
    assert len(set(ptrs)) == 1
    before = reused.get_logits().clone()
    decode_seq(reused, toks[9:10], 0, 9)
    assert not torch.equal(reused.get_logits(), before)  # overwritten by the next decode, as in llama.cpp


# --- n_kv padding ----------------------------------------------------------------------------------
def test_n_kv_is_padded_to_256_and_capped(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=768))
    assert ctx.memory.n_kv(0) == 256
    decode_seq(ctx, rand_tokens(300, tiny.n_vocab, 6), 0)
    assert ctx.memory.n_kv(0) == 512
    decode_seq(ctx, rand_tokens(300, tiny.n_vocab, 7), 0, pos0=300)
    assert ctx.memory.n_kv(0) == 768  # capped at the cache size


# --- invariance: the mask is the only thing that separates sequences -------------------------------
def _mixed_vs_alone(model, params: ContextParams, lens=(7, 12, 5), seed=0, atol=TOL):
    seqs = [rand_tokens(n, model.n_vocab, seed + s) for s, n in enumerate(lens)]
    alone = []
    for s, toks in enumerate(seqs):
        ctx = Context(model, ContextParams(n_ctx=params.n_ctx, n_seq_max=1, type_k=params.type_k, type_v=params.type_v))
        alone.append(decode_seq(ctx, toks, 0))
    ctx = Context(model, params)
    slots = [(s, i, t) for s, toks in enumerate(seqs) for i, t in enumerate(toks)]
    rng = random.Random(seed)
    # shuffle across sequences while keeping each sequence's own order (positions must continue)
    per_seq_next = [0] * len(seqs)
    pending = {s: [x for x in slots if x[0] == s] for s in range(len(seqs))}
    b = Batch()
    for _ in range(len(slots)):
        s = rng.choice([k for k, v in pending.items() if v])
        _, i, t = pending[s].pop(0)
        assert i == per_seq_next[s]
        per_seq_next[s] += 1
        b.add(t, i, [s], logits=True)
    ctx.decode(b)
    for s, toks in enumerate(seqs):
        rows = [j for j in range(b.n_tokens) if b.seq_id[j][0] == s]
        mixed = torch.stack([ctx.get_logits_ith(j) for j in rows])
        torch.testing.assert_close(mixed, alone[s], atol=atol, rtol=0)
    return ctx


def test_mixed_ubatch_equals_alone_unified(tiny):
    ctx = _mixed_vs_alone(tiny, ContextParams(n_ctx=512, n_seq_max=3, kv_unified=True))
    assert ctx.stats.n_ubatches == 1  # all three sequences really shared one ubatch


def test_mixed_batch_equals_alone_streams(tiny):
    ctx = _mixed_vs_alone(tiny, ContextParams(n_ctx=768, n_seq_max=3, kv_unified=False))
    assert ctx.memory.n_stream == 3


@pytest.mark.slow
def test_mixed_ubatch_equals_alone_real_model(smollm2_path):
    # exact weights and an f32 cache: what is left is GEMM blocking (fp32 rounding), so any
    # leak across sequences would show far above the tolerance.
    exact = llamapy.Model.load(smollm2_path, exact=True)
    p = ContextParams(n_ctx=512, n_seq_max=3, kv_unified=True, type_k="f32", type_v="f32")
    _mixed_vs_alone(exact, p, lens=(9, 17, 4), atol=1e-3)


@pytest.mark.slow
def test_mixed_ubatch_same_argmax_fast_kernels(smollm2):
    """The default (quantized-kernel) path rounds through bf16 on a bf16 CPU from 5 rows on
    (1-4 rows: int16 activations), so logits move with the batch shape; the greedy choice must
    not, and the top logit only by bf16's rounding."""
    seqs = [rand_tokens(n, smollm2.n_vocab, 40 + n) for n in (9, 17, 4)]
    p = ContextParams(n_ctx=512, n_seq_max=3, kv_unified=True)
    alone = [decode_seq(Context(smollm2, ContextParams(n_ctx=512)), t, 0) for t in seqs]
    ctx = Context(smollm2, p)
    b = Batch()
    for i in range(max(map(len, seqs))):
        for s, t in enumerate(seqs):
            if i < len(t):
                b.add(t[i], i, [s], logits=True)
    ctx.decode(b)
    for s, ref in enumerate(alone):
        mixed = torch.stack([ctx.get_logits_ith(j) for j in range(b.n_tokens) if b.seq_id[j][0] == s])
        assert torch.equal(mixed.argmax(-1), ref.argmax(-1))
        # bf16 activations, group scales and outputs (2^-9 each) in every one of the 121
        # matmuls, rounded differently as the row count changes: measured up to 0.54% between
        # two bf16 shapes, 2.6% between bf16 (the 30-row batch) and int16 (4 rows alone)
        torch.testing.assert_close(mixed.max(-1).values, ref.max(-1).values, atol=0, rtol=4e-2)


def test_seq_cp_prefix_continues_like_recomputed(tiny):
    prefix, suffix = rand_tokens(20, tiny.n_vocab, 8), rand_tokens(6, tiny.n_vocab, 9)
    ctx = Context(tiny, ContextParams(n_ctx=512, n_seq_max=2, kv_unified=True))
    decode_seq(ctx, prefix, 0)
    used = ctx.memory.n_used()
    ctx.memory.seq_cp(0, 1, -1, -1)
    assert ctx.memory.n_used() == used  # shared cells, nothing copied
    shared = decode_seq(ctx, suffix, 1, pos0=len(prefix))
    ref = Context(tiny, ContextParams(n_ctx=512))
    recomputed = decode_seq(ref, prefix + suffix, 0)[len(prefix):]
    torch.testing.assert_close(shared, recomputed, atol=TOL, rtol=0)
    # seq 0 is untouched by seq 1's suffix
    assert ctx.memory.seq_pos_max(0) == len(prefix) - 1
    assert ctx.memory.seq_pos_max(1) == len(prefix) + len(suffix) - 1


def test_seq_rm_then_redecode_gives_same_logits(tiny):
    toks = rand_tokens(30, tiny.n_vocab, 10)
    ctx = Context(tiny, ContextParams(n_ctx=512))
    first = decode_seq(ctx, toks, 0)
    ctx.memory.seq_rm(0, 20, -1)
    assert ctx.memory.seq_pos_max(0) == 19
    again = decode_seq(ctx, toks[20:], 0, pos0=20)
    torch.testing.assert_close(again, first[20:], atol=TOL, rtol=0)


def test_seq_add_rerotates_k(tiny):
    """RoPE attention depends on relative positions only: tokens decoded at 100.. then shifted
    to 0.. continue exactly like tokens decoded at 0.. (f32 cache: no re-rounding of K)."""
    toks, nxt = rand_tokens(12, tiny.n_vocab, 11), rand_tokens(3, tiny.n_vocab, 12)
    f32 = dict(n_ctx=512, type_k="f32", type_v="f32")
    a = Context(tiny, ContextParams(**f32))
    decode_seq(a, toks, 0, pos0=100)
    a.memory.seq_add(0, -1, -1, -100)
    assert (a.memory.seq_pos_min(0), a.memory.seq_pos_max(0)) == (0, 11)
    shifted = decode_seq(a, nxt, 0, pos0=12)
    b = Context(tiny, ContextParams(**f32))
    decode_seq(b, toks, 0)
    direct = decode_seq(b, nxt, 0, pos0=12)
    torch.testing.assert_close(shifted, direct, atol=TOL, rtol=0)
    # without the re-rotation the continuation would differ noticeably
    c = Context(tiny, ContextParams(**f32))
    decode_seq(c, toks, 0, pos0=100)
    c.memory.seq_add(0, -1, -1, -100)
    for cells in c.memory.cells:
        cells.reset_shift()
    assert (decode_seq(c, nxt, 0, pos0=12) - direct).abs().max() > 1e-2


def test_seq_keep_and_clear(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=512, n_seq_max=3, kv_unified=True))
    for s in range(3):
        decode_seq(ctx, rand_tokens(5, tiny.n_vocab, 20 + s), s)
    ctx.memory.seq_keep(1)
    assert [ctx.memory.seq_pos_max(s) for s in range(3)] == [-1, 4, -1]
    ctx.memory.clear()
    assert ctx.memory.n_used() == 0 and ctx.memory.seq_pos_max(1) == -1


def test_flash_attn_off_materializes_same_result(tiny):
    toks = rand_tokens(40, tiny.n_vocab, 50)
    on = decode_seq(Context(tiny, ContextParams(n_ctx=512, flash_attn="on")), toks, 0)
    off = decode_seq(Context(tiny, ContextParams(n_ctx=512, flash_attn="off")), toks, 0)
    torch.testing.assert_close(on, off, atol=TOL, rtol=0)


def test_graph_reuse_single_stream_decode(tiny):
    """n_kv moves in 256-cell bands, so one-token decode rebuilds its inputs at most once per
    256 steps and reuses them in between."""
    ctx = Context(tiny, ContextParams(n_ctx=1024))
    decode_seq(ctx, rand_tokens(10, tiny.n_vocab, 60), 0)  # the prompt: its own shape
    g = ctx.graphs
    builds0 = g.n_builds
    for pos in range(10, 610):
        b = Batch()
        b.add(7, pos, [0], logits=True)
        ctx.decode(b)
    # 600 steps cross n_kv 256 -> 512 -> 768: three one-token shapes
    assert g.n_builds - builds0 == 3
    assert g.n_reuses == 600 - 3
    assert ctx.memory.n_kv(0) == 768
