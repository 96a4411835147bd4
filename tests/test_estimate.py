"""memory/estimate.py and memory/fit.py: the seed's worked example, llama.cpp's own figures
(tests/data/memory_ref_llamacpp.json, written by scripts/ref_memory.py), predicted == allocated
against real Contexts, SWA cell counts, and the fitter's rules."""
from __future__ import annotations

import itertools
import json
import logging
import re
from dataclasses import replace
from pathlib import Path

import pytest

from llamapy import Batch, Context, ContextParams
from llamapy.memory.estimate import MiB, ModelInfo, estimate_from, estimate_memory, model_info, swa_cells
from llamapy.memory.fit import MemoryBudgetError, fit_ctx, largest_fitting_ctx
from llamapy.model.hparams import HParams

REF = json.loads((Path(__file__).parent / "data/memory_ref_llamacpp.json").read_text())["runs"]
KiB = 1024


def hp_8b(n_head_kv: int = 8, n_ctx_train: int = 131072) -> HParams:
    """The seed's Llama-3-shaped 8B: 32 layers, n_embd 4096, 32 query heads."""
    return HParams(arch="llama", n_ctx_train=n_ctx_train, n_embd=4096, n_layer=32, n_ff=14336, n_head=32,
                   n_head_kv=n_head_kv, n_embd_head_k=128, n_embd_head_v=128, n_vocab=128256, f_norm_rms_eps=1e-5,
                   rope_freq_base=500000.0, rope_freq_base_swa=500000.0, rope_freq_scale=1.0, n_rot=128)


def est(hp: HParams, **kw):
    return estimate_memory(ModelInfo(hp, 0, 0), ContextParams(**kw))


# --- the seed's worked example -------------------------------------------------------------------
@pytest.mark.parametrize("n_ctx,mib", [(8192, 1024), (32768, 4096), (131072, 16384)])
def test_worked_example_8b(n_ctx, mib):
    e = est(hp_8b(), n_ctx=n_ctx)
    (cache,) = e.caches
    assert cache.bytes_per_token == 128 * KiB  # (1024 + 1024) x 2 bytes x 32 layers
    assert e.kv == mib * MiB and e.kv_k == e.kv_v == mib * MiB // 2
    assert cache.log_line() == f"size = {mib:7.2f} MiB ({n_ctx:6d} cells,  32 layers,  1/1 seqs), K (f16): {mib / 2:7.2f} MiB, V (f16): {mib / 2:7.2f} MiB"
    assert est(hp_8b(n_head_kv=32), n_ctx=n_ctx).kv == 4 * mib * MiB  # without GQA


def test_kv_types_scale_bytes_per_token():
    # q8_0: 34 bytes per 32 values; q4_0: 18; f32: 4 per value
    per_tok = {t: est(hp_8b(), n_ctx=4096, type_k=t, type_v=t).caches[0].bytes_per_token for t in ("f32", "f16", "q8_0", "q4_0")}
    assert per_tok == {"f32": 256 * KiB, "f16": 128 * KiB, "q8_0": 2 * 32 * 1024 // 32 * 34, "q4_0": 2 * 32 * 1024 // 32 * 18}


# --- llama.cpp's own numbers ---------------------------------------------------------------------
def _flags(s: str) -> ContextParams:
    """ContextParams from a llama.cpp flag string of the reference file."""
    t = s.split()
    get = lambda f, d: t[t.index(f) + 1] if f in t else d  # noqa: E731
    return ContextParams(n_ctx=int(get("-c", 0)), n_ubatch=int(get("-ub", 512)), n_seq_max=int(get("-np", 1)),
                         type_k=get("-ctk", "f16"), type_v=get("-ctv", "f16"), flash_attn=get("-fa", "auto"),
                         kv_unified="--kv-unified" in t, swa_full="--swa-full" in t)


def _check_against_llamacpp(path: Path, runs: dict[str, list[str]]) -> None:
    info = model_info(path)
    for flags, lines in runs.items():
        e = estimate_memory(info, _flags(flags))
        want_kv = [l.removeprefix("llama_kv_cache: ") for l in lines if l.startswith("llama_kv_cache: size")]
        assert [c.log_line() for c in e.caches] == want_kv, flags
        want_iswa = [int(m) for l in lines for m in re.findall(r"KV cache, size = (\d+) cells", l)]
        if want_iswa:
            assert [c.cells for c in e.caches] == want_iswa, flags
        # llama.cpp's output buffer: one row of logits per sequence at creation
        out = next(l for l in lines if "output buffer size" in l)
        assert f"{e.output / MiB:.2f} MiB" in out, flags


def test_smollm2_matches_llamacpp(smollm2_path):
    # e.g. llama-completion -m SmolLM2-135M-Instruct.Q4_1.gguf -p hi -n 1 -c 8192 -ctk q8_0 -ctv q8_0 -no-cnv -v
    #   llama_kv_cache: size =   95.62 MiB (  8192 cells,  30 layers,  1/1 seqs), K (q8_0):   47.81 MiB, V (q8_0):   47.81 MiB
    _check_against_llamacpp(smollm2_path, REF["smollm2"])
    e = estimate_memory(smollm2_path, ContextParams(n_ctx=8192, type_k="q8_0", type_v="q8_0"))
    assert e.caches[0].log_line().startswith("size =   95.62 MiB")


def test_gemma3_iswa_matches_llamacpp(gemma3_path):
    # llama-completion -m gemma-3-270m-q4_k_m.gguf -p hi -n 1 -c 8192 -no-cnv -v:
    #   non-SWA 24.00 MiB (8192 cells, 3 layers), SWA 15.00 MiB (1024 cells, 15 layers)
    _check_against_llamacpp(gemma3_path, REF["gemma3"])


def test_compute_reserves_less_than_llamacpp_at_ub512(smollm2_path):
    """llama.cpp reserves logits for every ubatch row: 98.25 MiB at -ub 512 (SmolLM2, -c 8192), about
    96 MiB of it logits ([512, 49152] f32).  We reserve logits for the outputs only (one per
    sequence by default), so our whole compute reservation stays below llama.cpp's."""
    ref = REF["smollm2"]["-c 8192 -ub 512"][-1]
    llamacpp_mib = float(re.search(r"compute buffer size = +([\d.]+) MiB", ref).group(1))
    assert llamacpp_mib == 98.25
    e = estimate_memory(smollm2_path, ContextParams(n_ctx=8192, n_ubatch=512))
    terms = {t.name: t for t in e.compute_terms}
    assert terms["result_output (logits)"].shape == (1, 49152)
    assert e.compute / MiB < llamacpp_mib
    every_row = estimate_memory(smollm2_path, ContextParams(n_ctx=8192, n_ubatch=512), n_outputs=512)
    delta = every_row.compute_by_phase()["output"] - e.compute_by_phase()["output"]
    assert delta == 511 * (49152 + 576) * 4  # logits + result_norm rows
    assert every_row.compute > e.compute


# --- predicted == allocated ------------------------------------------------------------------------
KV_PAIRS = [("f16", "f16"), ("q8_0", "q4_0"), ("f32", "bf16"), ("iq4_nl", "q5_1"), ("q4_1", "q5_0")]
GRID = list(itertools.product((256, 1000, 2048), (64, 512), (1, 3), (False, True)))


@pytest.mark.parametrize("n_ctx,n_ubatch,n_seq_max,kv_unified", GRID)
def test_kv_bytes_equal_allocation_tiny(tiny, tiny_path, n_ctx, n_ubatch, n_seq_max, kv_unified):
    info = model_info(tiny_path)  # header only, not the loaded model
    assert info.weights == tiny.n_bytes_resident
    for tk, tv in KV_PAIRS:
        p = ContextParams(n_ctx=n_ctx, n_ubatch=n_ubatch, n_seq_max=n_seq_max, kv_unified=kv_unified, type_k=tk, type_v=tv)
        e = estimate_memory(info, p)
        ctx = Context(tiny, p)
        rep = ctx.memory_report()
        assert (e.kv_k, e.kv_v, e.weights) == (rep["kv_k"], rep["kv_v"], rep["model"]), (tk, tv)
        assert e.cparams == ctx.cparams
        assert e.caches[0].cells == ctx.memory.size and e.caches[0].n_stream == ctx.memory.n_stream


def test_output_bytes_equal_logits_of_one_token_per_sequence(tiny):
    p = ContextParams(n_ctx=512, n_seq_max=3)
    ctx = Context(tiny, p)
    b = Batch()
    for s in range(3):
        b.add(5 + s, 0, [s], logits=True)
    ctx.decode(b)
    assert ctx.memory_report()["output"] == estimate_memory(tiny, p).output


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(n_ctx=8192, type_k="q8_0", type_v="q8_0"), dict(n_ctx=2048, n_seq_max=4, type_k="q4_0", type_v="q5_1"),
                                dict(n_ctx=1024, n_seq_max=2, kv_unified=True, n_ubatch=64, type_k="iq4_nl", type_v="bf16")])
def test_kv_bytes_equal_allocation_smollm2(smollm2, smollm2_path, kw):
    p = ContextParams(**kw)
    e = estimate_memory(smollm2_path, p)
    rep = Context(smollm2, p).memory_report()
    assert (e.kv_k, e.kv_v) == (rep["kv_k"], rep["kv_v"])
    assert estimate_memory(smollm2, p).weights == smollm2.n_bytes_resident  # a loaded model reports its own


# --- sliding window ---------------------------------------------------------------------------------
def test_swa_cells_formula():
    assert swa_cells(8192, 512, 1, False, 512) == 1024
    assert swa_cells(4096, 512, 1, False, 128) == 768  # 640 padded to 256
    assert swa_cells(4096, 512, 4, True, 512) == 2560  # a unified stream holds every sequence's window
    assert swa_cells(4096, 512, 4, False, 512) == 1024
    assert swa_cells(768, 512, 1, False, 512) == 768  # never more than the full stream
    assert swa_cells(8192, 512, 1, False, 512, swa_full=True) == 8192


def test_swa_model_gets_two_caches():
    hp = replace(hp_8b(n_ctx_train=32768), n_swa=1024, swa_layers=tuple(il % 4 != 3 for il in range(32)))
    e = est(hp, n_ctx=16384)
    dense, swa = e.caches
    assert (len(dense.layers), len(swa.layers)) == (8, 24)
    assert (dense.cells, swa.cells) == (16384, 1536)
    assert e.kv == (16384 * 8 + 1536 * 24) * 4096
    assert est(hp, n_ctx=16384, swa_full=True).kv == 16384 * 32 * 4096


# --- compute and output -----------------------------------------------------------------------------
def test_compute_kq_only_without_flash_attn_and_logits_only_for_outputs():
    hp = hp_8b()
    on, off = est(hp, n_ctx=8192, flash_attn="on"), est(hp, n_ctx=8192, flash_attn="off")
    kq = {t.name: t for t in off.compute_terms}["kq (no flash attn)"]
    assert kq.shape == (32, 512, 8192) and not any("kq (" in t.name for t in on.compute_terms)
    assert off.compute > on.compute
    logits = {t.name: t for t in on.compute_terms}["result_output (logits)"]
    assert logits.shape == (1, hp.n_vocab)
    many = estimate_memory(ModelInfo(hp, 0, 0), ContextParams(n_ctx=8192), n_outputs=512)
    assert {t.name: t for t in many.compute_terms}["result_output (logits)"].shape == (512, hp.n_vocab)
    # the compute buffer stops growing with -c above n_ubatch only through n_kv-sized terms
    small = est(hp, n_ctx=256, n_ubatch=512)
    assert {t.name: t.shape for t in small.compute_terms}["wqkv output"] == (256, 4096 + 2 * 1024)


def test_few_row_attention_scratch_over_block_caches():
    """Ubatches under FAST_ROWS rows attend through the C kernel; over a q8_0 / q4_0 cache each
    thread widens up to KV_WIDEN visible cells to f32, counted per thread whatever -c is; an
    f16 cache is read in place and a 512-row ubatch takes the other path (no such term)."""
    from llamapy.kernels.types import attn_kv_scratch_bytes
    from llamapy.memory.host import kernels_expected, torch_threads

    hp = hp_8b()
    name = "kv cells widened (kernel scratch)"

    def scratch(**kw):
        return {t.name: t for t in est(hp, flash_attn="on", **kw).compute_terms}.get(name)

    want = torch_threads() * attn_kv_scratch_bytes(128, 128) if kernels_expected() else None
    for n_ctx in (4096, 131072):
        got = scratch(n_ctx=n_ctx, n_ubatch=16, type_k="q8_0", type_v="q4_0")
        assert (got.bytes if got else None) == want
    assert scratch(n_ctx=4096, n_ubatch=16) is None  # f16
    assert scratch(n_ctx=4096, n_ubatch=512, type_k="q8_0", type_v="q8_0") is None


# --- fitting ----------------------------------------------------------------------------------------
def test_fit_reduces_trained_context_in_steps_of_256(caplog):
    info = ModelInfo(hp_8b(), 4000 * MiB, 0)
    p = ContextParams(n_ctx=0, flash_attn="on")
    budget = 8000 * MiB
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        r = fit_ctx(info, p, budget)
    assert r.reduced and r.n_ctx % 256 == 0 and 4096 <= r.n_ctx < 131072
    assert estimate_memory(info, replace(p, n_ctx=r.n_ctx)).total <= budget < estimate_memory(info, replace(p, n_ctx=r.n_ctx + 256)).total
    assert f"context size reduced from 131072 to {r.n_ctx}" in caplog.text and "8000.00 MiB" in caplog.text


def test_fit_keeps_trained_context_when_it_fits():
    r = fit_ctx(ModelInfo(hp_8b(n_ctx_train=8192), 0, 0), ContextParams(n_ctx=0), 64 * 1024 * MiB)
    assert (r.n_ctx, r.reduced) == (8192, False)


def test_fit_floor_is_4096():
    info = ModelInfo(hp_8b(), 4000 * MiB, 0)
    need_4096 = estimate_memory(info, ContextParams(n_ctx=4096)).total
    assert fit_ctx(info, ContextParams(), need_4096).n_ctx == 4096
    with pytest.raises(MemoryBudgetError, match=r"floor of 4096"):
        fit_ctx(info, ContextParams(), need_4096 - 1)


def test_explicit_ctx_is_never_fitted():
    info = ModelInfo(hp_8b(), 4000 * MiB, 0)
    with pytest.raises(MemoryBudgetError, match=r"-c 32768 needs weights 4000.00 MiB \+ KV 4096.00 MiB .* budget is 6000.00 MiB"):
        fit_ctx(info, ContextParams(n_ctx=32768), 6000 * MiB)
    assert fit_ctx(info, ContextParams(n_ctx=32768), 64 * 1024 * MiB).n_ctx == 32768


def test_largest_fitting_ctx_per_kv_type():
    info = ModelInfo(hp_8b(), 0, 0)
    n16 = largest_fitting_ctx(info, ContextParams(flash_attn="on"), 4096 * MiB)
    n8 = largest_fitting_ctx(info, ContextParams(flash_attn="on", type_k="q8_0", type_v="q8_0"), 4096 * MiB)
    assert 0 < n16 < n8 and n16 % 256 == 0
    assert estimate_from(info.hparams, estimate_memory(info, ContextParams(n_ctx=n16, flash_attn="on")).cparams).total <= 4096 * MiB


# --- predicted == allocated by the memory factory Context uses, on real models' headers -----------
REAL_GRID = [
    dict(n_ctx=8192, type_k="q8_0", type_v="q8_0"),
    dict(n_ctx=4096, n_seq_max=2, n_ubatch=128, type_k="q4_0", type_v="q5_1"),
    dict(n_ctx=3000, n_seq_max=3, kv_unified=True, n_ubatch=64, type_k="iq4_nl", type_v="bf16"),
    dict(n_ctx=2048, n_seq_max=4, n_batch=256, type_k="f32", type_v="q4_1"),
    dict(n_ctx=8192, swa_full=True, type_k="q5_0", type_v="f16"),
]


@pytest.mark.parametrize("kw", REAL_GRID)
@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_kv_bytes_equal_create_memory_real_headers(request, which, kw):
    """The caches Context allocates (memory.factory.create_memory, KVCacheISWA for Gemma 3),
    built from the real model's hyperparameters, hold exactly the predicted bytes and cells."""
    from llamapy.memory.factory import create_memory

    info = model_info(request.getfixturevalue(f"{which}_path"))
    e = estimate_memory(info, ContextParams(**kw))
    mem = create_memory(info.hparams, e.cparams)
    caches = getattr(mem, "caches", (mem,))
    assert (e.kv_k, e.kv_v) == (mem.size_k_bytes(), mem.size_v_bytes())
    assert [c.cells for c in e.caches] == [c.size for c in caches]
    assert [list(c.layers) for c in e.caches] == [c.layers for c in caches]


def test_nkvo_keeps_the_kv_cache_out_of_the_device_budget():
    """-nkvo on CUDA: the KV cache is host memory, so the device's budget holds weights,
    compute and output only (llama.cpp's no_kv_offload); on the CPU it changes nothing."""
    info = ModelInfo(hp_8b(), 4000 * MiB, 0)
    gpu = ContextParams(n_ctx=32768, device="cuda", offload_kqv=False)
    e = estimate_memory(info, gpu)
    assert not e.cparams.offload_kqv and e.kv == 4096 * MiB
    assert e.device_total == e.total - e.kv
    r = fit_ctx(info, gpu, 6000 * MiB)  # with the cache on the device, 32768 needs > 8 GiB
    assert r.n_ctx == 32768
    with pytest.raises(MemoryBudgetError, match=r"on the device \(KV 4096.00 MiB in host memory, -nkvo\)"):
        fit_ctx(info, gpu, e.device_total - 1)
    cpu = estimate_memory(info, replace(gpu, device="cpu"))
    assert cpu.cparams.offload_kqv and cpu.device_total == cpu.total
    with pytest.raises(MemoryBudgetError):
        fit_ctx(info, replace(gpu, device="cpu"), 6000 * MiB)


@pytest.mark.parametrize("n_t,n_in,n_out", [(512, 256, 64), (512, 2048, 512), (512, 8192, 2048), (130, 2048, 8192)])
def test_fp32_gemm_temporaries_bound_the_int8_rows(n_t, n_in, n_out):
    """Where the AVX2 level's K-quants take lp_mm_q8 instead of the fp32 GEMM, a matmul's reserved
    temporaries hold its memory: one slice of q8mm_slice_rows activation rows (kernels/c/q8mm_x86.c
    q8x_bytes, restated, and the same rows in Q8_K with q8p_mm's row lists, q8p_x86.c lp_q8p_x_bytes) and each thread's panel (q8_scratch_bytes at the AVX-512 level's 32 rows,
    the larger), small matrices included (there the fp32 GEMM's own temporaries are the smaller)."""
    from llamapy.kernels.types import q8mm_slice_rows
    from llamapy.memory.op_terms import matmul_terms
    from llamapy.memory.host import torch_threads

    terms = matmul_terms("mm", n_t, n_in, n_out, "prompt", blocks=True, dense="fp32")
    temps = next(t.bytes for t in terms if t.name == "mm temporaries")
    rows = min(n_t, q8mm_slice_rows(n_in))
    q8x = rows * (2 * n_in + n_in // 16 * 12 + n_in // 32 * 5 + 4) + 6 * 64
    q8x += rows * (n_in + n_in // 256 * 4 + n_in // 16 * 2 + n_in // 32 * 2 + 1) + 6 * 64 + (2 * rows + 1) * 8  # (q8p_x86.c's Q8_K rows)
    panel = n_in * 32 + 2 * (n_in // 16) * 32 * 4 + n_in * 3 + (n_in // 16) * 8 + 6 * 64
    assert temps >= q8x + torch_threads() * panel
