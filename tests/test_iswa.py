"""The sliding-window KV cache pair (llama_kv_cache_iswa) on a tiny gemma3 model: sizes and log
lines, window-limited caches that give the same logits as full-size ones, long sequences in a
small SWA cache, sequence operations on both caches, and prefix reuse once the window moved."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from tiny_gemma3 import write_tiny_gemma3

import llamapy
from llamapy.gguf.header import GGUFHeader
from llamapy.memory.factory import can_reuse_prefix
from llamapy.memory.estimate import swa_cells as swa_cache_size
from llamapy.memory.iswa import KVCacheISWA
from llamapy.model.hparams import hparams_from_gguf

ATOL = 2e-4  # same model, same f32/f16 data: only the order of the cells differs


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_g3(tmp_path_factory):
    """Window 200: with -ub 56 the SWA cache is exactly 256 cells, so cells must be reused."""
    return llamapy.Model.load(write_tiny_gemma3(tmp_path_factory.mktemp("g3") / "tiny-gemma3.gguf", n_swa=200))


def _ctx(model, **kw) -> llamapy.Context:
    p = dict(n_ctx=4096, n_batch=512, n_ubatch=56, type_k="f32", type_v="f32")
    p.update(kw)
    return llamapy.Context(model, llamapy.ContextParams(**p))


def _tokens(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 256, n).tolist()


def _decode(ctx: llamapy.Context, toks: list[int], p0: int = 0, seq: int = 0, n_batch: int = 512) -> torch.Tensor:
    """Decode toks at positions p0.. in batches; logits of every token [len(toks), n_vocab]."""
    out = []
    for i in range(0, len(toks), n_batch):
        b = llamapy.Batch()
        for j, t in enumerate(toks[i : i + n_batch]):
            b.add(t, p0 + i + j, [seq], logits=True)
        ctx.decode(b)
        out.append(ctx.get_logits().clone())
    return torch.cat(out)


def test_swa_cache_size_formula():
    # gemma3-270m (n_swa 512), checked against llama-completion's log lines:
    #   -c 8192                 -> "creating     SWA KV cache, size = 1024 cells"
    #   -c 8192 -np 4 -ub 256   -> non-SWA 2048 cells per stream, SWA 768 cells per stream
    assert swa_cache_size(8192, 512, 1, False, 512, False) == 1024
    assert swa_cache_size(2048, 512, 4, False, 256, False) == 768
    assert swa_cache_size(8192, 512, 4, True, 512, False) == 2560  # unified: a window per sequence
    assert swa_cache_size(8192, 512, 1, False, 512, True) == 8192  # --swa-full
    assert swa_cache_size(512, 512, 1, False, 512, False) == 512  # never above n_ctx_seq
    assert swa_cache_size(4096, 200, 1, False, 56, False) == 256


def test_gemma3_270m_cache_log_lines(gemma3_path, caplog):
    hp = hparams_from_gguf(GGUFHeader(gemma3_path))
    with caplog.at_level(logging.INFO, logger="llamapy"):
        kv = KVCacheISWA(hp, 8192, 1, False, 512)
    msgs = [f"{r.name.split('.', 1)[1]}: {r.getMessage()}" for r in caplog.records]
    assert "llama_kv_cache_iswa: creating non-SWA KV cache, size = 8192 cells" in msgs
    assert "llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells" in msgs
    sizes = [m for m in msgs if m.startswith("llama_kv_cache: size =")]
    assert sizes[0].startswith("llama_kv_cache: size =   24.00 MiB (  8192 cells,   3 layers,  1/1 seqs)")
    assert sizes[1].startswith("llama_kv_cache: size =   15.00 MiB (  1024 cells,  15 layers,  1/1 seqs)")
    assert kv.size_k_bytes() + kv.size_v_bytes() == 39 * 1024 * 1024
    assert [kv.cache_for_layer(il) is kv.kv_base for il in range(18)] == [il % 6 == 5 for il in range(18)]


def test_small_swa_cache_matches_full_size(tiny_g3):
    """1,500 tokens through a 256-cell SWA cache (cells overwritten many times) give the same
    logits as with --swa-full (every cell kept, only the mask hides old ones)."""
    toks = _tokens(1500)
    small = _ctx(tiny_g3)
    full = _ctx(tiny_g3, swa_full=True)
    assert small.memory.kv_swa.size == 256 and full.memory.kv_swa.size == 4096
    a, b = _decode(small, toks), _decode(full, toks)
    assert small.memory.kv_swa.n_used() <= 256
    assert full.memory.kv_swa.n_used() == 1500 == small.memory.kv_base.n_used()
    assert torch.allclose(a, b, atol=ATOL), (a - b).abs().max()


def test_window_changes_logits(tiny_g3, tmp_path):
    """The window matters: the same weights with a window wider than the text differ after 200."""
    wide = llamapy.Model.load(write_tiny_gemma3(tmp_path / "wide.gguf", n_swa=4096))
    toks = _tokens(400)
    a, b = _decode(_ctx(tiny_g3), toks), _decode(_ctx(wide), toks)
    assert torch.allclose(a[:200], b[:200], atol=ATOL)
    assert not torch.allclose(a[200:], b[200:], atol=1e-2)


@pytest.mark.slow
def test_30000_tokens_in_1024_swa_cells(tmp_path):
    model = llamapy.Model.load(write_tiny_gemma3(tmp_path / "w512.gguf", n_swa=512))
    ctx = _ctx(model, n_ctx=30208, n_batch=2048, n_ubatch=512, type_k="f16", type_v="f16")
    assert ctx.memory.kv_swa.size == 1024
    toks = _tokens(30000)
    for i in range(0, 30000, 2048):
        b = llamapy.Batch()
        for j, t in enumerate(toks[i : i + 2048]):
            b.add(t, i + j, [0], logits=(i + j == 29999))
        ctx.decode(b)
        assert ctx.memory.kv_swa.n_used() <= 1024
    assert ctx.memory.kv_base.n_used() == 30000
    assert ctx.memory.seq_pos_max(0) == 29999
    assert 29999 - 1024 < ctx.memory.seq_pos_min(0) <= 29999 - 511  # the window is still there
    assert torch.isfinite(ctx.get_logits_ith(-1)).all()


def test_two_sequences_unified_mixed_equals_alone(tiny_g3):
    """Unified SWA cache (a window per sequence + n_ubatch): sequences interleaved in every
    ubatch give the same logits as each decoded alone."""
    t0, t1 = _tokens(600, 1), _tokens(600, 2)
    ctx = _ctx(tiny_g3, n_seq_max=2, kv_unified=True, n_ubatch=64)
    assert ctx.memory.kv_swa.size == swa_cache_size(4096, 200, 2, True, 64, False) == 512
    outs: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    for i in range(0, 600, 50):
        b = llamapy.Batch()
        for j in range(i, i + 50):
            b.add(t0[j], j, [0], logits=True)
            b.add(t1[j], j, [1], logits=True)
        ctx.decode(b)
        lg = ctx.get_logits()
        outs[0].append(lg[0::2].clone())
        outs[1].append(lg[1::2].clone())
    for s, toks in ((0, t0), (1, t1)):
        alone = _decode(_ctx(tiny_g3, n_ubatch=64), toks)
        assert torch.allclose(torch.cat(outs[s]), alone, atol=ATOL), s


def test_seq_ops_keep_both_caches_consistent(tiny_g3):
    toks = _tokens(700)
    ctx = _ctx(tiny_g3, n_seq_max=2, kv_unified=True)
    _decode(ctx, toks[:600])
    mem = ctx.memory
    mem.seq_cp(0, 1)
    assert mem.kv_base.seq_pos_max(1) == mem.kv_swa.seq_pos_max(1) == 599
    assert mem.kv_swa.seq_pos_min(1) == mem.kv_swa.seq_pos_min(0) > 0
    assert mem.kv_base.seq_pos_min(1) == 0
    mem.seq_rm(0, 550, -1)
    assert mem.kv_base.seq_pos_max(0) == mem.kv_swa.seq_pos_max(0) == 549
    assert mem.kv_base.seq_pos_max(1) == mem.kv_swa.seq_pos_max(1) == 599  # seq 1 keeps its cells
    # SWA cells seen by two sequences are never reused (llama.cpp's find_slot rule), so seq 0
    # must go before seq 1 can advance in this full cache
    mem.seq_keep(1)
    assert mem.kv_base.seq_pos_max(0) == mem.kv_swa.seq_pos_max(0) == -1
    a = _decode(ctx, toks[600:], p0=600, seq=1)
    ref = _decode(_ctx(tiny_g3), toks)[600:]
    assert torch.allclose(a, ref, atol=ATOL)


def test_prefix_reuse_under_window(tiny_g3):
    """After 1,000 tokens the 256-cell SWA cache holds only the last ~250 positions: a prefix
    can be kept only if the window before its end is still cached; the check is exact."""
    toks = _tokens(1100, 3)
    ref = _decode(_ctx(tiny_g3), toks)
    ctx = _ctx(tiny_g3)
    _decode(ctx, toks[:1000])
    mem = ctx.memory
    pmin = mem.seq_pos_min(0)
    assert 1000 - 256 <= pmin <= 1000 - 199
    lo, hi = mem.prefix_reuse_range(0)
    assert (lo, hi) == (pmin + 199, 1000)
    assert mem.can_reuse_prefix(0, 0) and mem.can_reuse_prefix(0, 1000) and mem.can_reuse_prefix(0, lo)
    assert not mem.can_reuse_prefix(0, lo - 1) and not mem.can_reuse_prefix(0, 1001)
    assert can_reuse_prefix(mem, 0, lo) and not can_reuse_prefix(mem, 0, 10)
    # reuse at lo: seq_rm the rest, continue -> same logits as a full recompute
    mem.seq_rm(0, lo, -1)
    assert torch.allclose(_decode(ctx, toks[lo:1100], p0=lo), ref[lo:], atol=ATOL)
    # at lo - 1 the query at lo - 1 would miss position pmin - 1 of its window: logits differ
    ctx = _ctx(tiny_g3)
    _decode(ctx, toks[:1000])
    assert ctx.memory.prefix_reuse_range(0) == (lo, hi)
    ctx.memory.seq_rm(0, lo - 1, -1)
    bad = _decode(ctx, toks[lo - 1 : lo + 20], p0=lo - 1)
    assert not torch.allclose(bad[0], ref[lo - 1], atol=1e-3)


def test_kshift_rotates_each_layer_with_its_base(tiny_g3):
    """seq_add on a --swa-full cache: K re-rotated with the SWA base (10000) on window layers
    and 1e6 on global ones gives the logits of decoding at the shifted positions."""
    toks = _tokens(300, 4)
    ctx = _ctx(tiny_g3, swa_full=True)
    assert ctx.memory.can_shift and not _ctx(tiny_g3).memory.can_shift
    _decode(ctx, toks[:299])
    ctx.memory.seq_add(0, 0, -1, 7)
    shifted = _decode(ctx, toks[299:], p0=306)
    direct = _decode(_ctx(tiny_g3, swa_full=True), toks, p0=7)[299:]
    assert torch.allclose(shifted, direct, atol=ATOL)
