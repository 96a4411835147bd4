"""The context's kept compute buffer (model/work.py): the FFN's gate|up product written into it
instead of a fresh mapping per layer per ubatch, the same bits; the products' `out` on every
path of BlockMatrix; the estimate counting it as persistent; a prompt no longer faulting it in;
the fused C layers' working region (a --deterministic prompt) carved from it, the same bits."""
from __future__ import annotations

import resource

import gguf
import pytest
import torch

import llamapy
from kernel_level import kernels_at
from llamapy.memory.heap import MMAP_THRESHOLD
from llamapy.memory.op_terms import matmul_terms
from llamapy.model.block_matrix import BlockMatrix, block_matrix
from llamapy.model.qmatrix import StackedMatrix
from llamapy.model.work import ComputeWork
from test_kernels import _matrix

T = gguf.GGMLQuantizationType


def test_take_keeps_one_buffer():
    w = ComputeWork(min_bytes=1000)
    assert w.take(10, 20) is None and w.nbytes == 0  # 800 bytes: below min_bytes, the caller's own
    a = w.take(10, 30)
    assert a.shape == (10, 30) and a.is_contiguous() and a.dtype == torch.float32 and w.nbytes == 300 * 4
    c = w.take(7, 40)  # smaller: the same bytes again
    assert c.shape == (7, 40) and c.data_ptr() == a.data_ptr() and w.nbytes == 300 * 4
    d = w.take(20, 40)  # larger: grown, and kept at that size
    assert d.shape == (20, 40) and w.nbytes == 800 * 4
    assert w.take(10, 30).data_ptr() == d.data_ptr()


@pytest.fixture(scope="module", params=["avx512", "avx2"])
def lib(request):
    return kernels_at(request.param)


@pytest.mark.parametrize("qtype,shape", [(T.Q4_K, (80, 512)), (T.Q6_K, (96, 256)), (T.Q4_0, (640, 4096)),
                                         (T.Q8_0, (80, 512)), (T.F16, (64, 256)), (T.F32, (48, 256))],
                         ids=lambda v: getattr(v, "name", "x".join(map(str, v)) if isinstance(v, tuple) else v))
def test_product_into_out_on_every_path(lib, qtype, shape, monkeypatch):
    """m(x, out) writes into out and returns it, bit for bit m(x), at every row count (one row,
    the lanes, the int8 rows, dequantize + GEMM whole or in chunks)."""
    dense = []
    real = BlockMatrix._dense_rows
    monkeypatch.setattr(BlockMatrix, "_dense_rows", lambda self, x, out=None: dense.append(out is not None) or real(self, x, out))
    raw, _ = _matrix(qtype, shape, seed=3)
    m = block_matrix([(raw, qtype, shape)], lib)
    for n in (1, 5, 20, 64, 200):
        x = torch.randn(n, shape[1], generator=torch.Generator().manual_seed(n))
        out = torch.full((n, shape[0]), float("nan"))
        dense.clear()
        y = m(x, out)
        assert y.data_ptr() == out.data_ptr() and all(dense)  # where the GEMM path ran, it was given out
        assert torch.equal(out, m(x))


@pytest.mark.parametrize("qtype,shape", [(T.Q4_0, (640, 4096)), (T.Q4_0, (80, 512)), (T.Q8_0, (80, 512)),
                                         (T.F32, (48, 256))], ids=["chunks", "whole-coarse", "whole-fine", "f32"])
def test_gemm_path_into_out(lib, qtype, shape, monkeypatch):
    """Dequantize + GEMM (taken here whatever this CPU's choice): in chunks straight into out, a
    whole product copied into it; the bits of the same path without out."""
    monkeypatch.setattr(BlockMatrix, "_int8", lambda self, x: 0)
    monkeypatch.setattr(BlockMatrix, "_dense", lambda self, n: True)
    raw, _ = _matrix(qtype, shape, seed=4)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(130, shape[1], generator=torch.Generator().manual_seed(4))
    out = torch.full((130, shape[0]), float("nan"))
    assert m(x, out).data_ptr() == out.data_ptr() and torch.equal(out, m(x))


def test_stacked_product_into_out(lib):
    parts = [(_matrix(T.Q4_K, (64, 256), seed=1)[0], T.Q4_K, (64, 256)),
             (_matrix(T.Q6_K, (32, 256), seed=2)[0], T.Q6_K, (32, 256))]
    m = StackedMatrix([block_matrix([p], lib) for p in parts])
    x = torch.randn(70, 256, generator=torch.Generator().manual_seed(0))
    out = torch.full((70, 96), float("nan"))
    assert m(x, out).data_ptr() == out.data_ptr() and torch.equal(out, m(x))


def _prompt(model, n: int, rep: int = 0) -> llamapy.Batch:
    b = llamapy.Batch()
    for i in range(n):
        b.add((7 + 31 * i + rep) % model.n_vocab, i, (0,), logits=True)
    return b


def test_gate_up_into_the_kept_buffer_same_bits(smollm2_path):
    """With every product kept (min_bytes 0), the gate|up products go into the context's one buffer,
    reused from ubatch to ubatch, and every logit is the bits of a context that keeps none."""
    model = llamapy.Model.load(smollm2_path)
    p = llamapy.ContextParams(n_ctx=512, n_ubatch=128, n_threads=1)
    ref, kept = llamapy.Context(model, p), llamapy.Context(model, p)
    ref.work, kept.work = None, ComputeWork(min_bytes=0)
    width = 2 * model.hparams.n_ff
    ptr = None
    for rep in range(2):
        for ctx in (ref, kept):
            ctx.decode(_prompt(model, 100, rep))
        assert torch.equal(ref.get_logits(), kept.get_logits())
        assert kept.work.nbytes == 100 * width * 4
        buf = kept.work.take(100, width)
        assert not buf.isnan().any()  # written through (NaN below, from the last round)
        assert ptr in (None, buf.data_ptr())  # the same bytes
        ptr = buf.data_ptr()
        with torch.inference_mode():  # the buffer was made in decode's inference mode
            buf.fill_(float("nan"))
        for ctx in (ref, kept):
            ctx.memory.seq_rm(0, 0, -1)


def test_estimate_counts_the_kept_product_as_persistent(smollm2_path):
    big = MMAP_THRESHOLD // 4 // 512 + 1  # [512, big] float32 reaches the threshold
    phase = {n_out: matmul_terms("g", 512, 64, n_out, "ffn", "", blocks=True, kept=True)[-1].phase
             for n_out in (big, big - 2)}
    assert phase == {big: "persistent", big - 2: "ffn"}
    assert matmul_terms("g", 512, 64, big, "ffn", "", blocks=False, kept=True)[-1].phase == "ffn"
    from llamapy.memory.estimate import estimate_memory
    from llamapy.memory.host import kernels_expected

    e = estimate_memory(smollm2_path, llamapy.ContextParams(n_ctx=4096, n_batch=4096, n_ubatch=4096))  # [4096, 3072] f32: 48 MiB
    (t,) = (t for t in e.compute_terms if t.name == "ffn_gate|up output")
    assert t.phase == ("persistent" if kernels_expected() else "ffn")


@pytest.mark.slow
def test_long_ubatch_faults_no_gate_up_pages(smollm2_path):
    """A ubatch whose gate|up product is past glibc's mmap threshold (SmolLM2: 2800 rows x 3072 =
    33 MB) faults its pages in once, not once per layer per ubatch (30 x 8400 pages before)."""
    model = llamapy.Model.load(smollm2_path)
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=3072, n_batch=3072, n_ubatch=3072, n_threads=1))
    n, width = 2800, 2 * model.hparams.n_ff
    assert n * width * 4 >= MMAP_THRESHOLD
    faults = []
    for rep in range(3):
        b = llamapy.Batch()
        for i in range(n):
            b.add((7 + 31 * i + rep) % model.n_vocab, i, (0,), logits=i == n - 1)
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        ctx.decode(b)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        ctx.memory.seq_rm(0, 0, -1)
    per_layer = n * width * 4 // 4096
    print(f"faults per decode {faults}, gate|up pages {per_layer} x {model.hparams.n_layer} layers")
    assert max(faults[1:]) < 4 * per_layer, (faults, per_layer)  # was up to n_layer (30) x per_layer


def test_deterministic_fused_layers_keep_their_working_bytes(gemma3_path):
    """A --deterministic prompt goes through the fused C layers (kernels/c/layers.c lp_layers), whose
    working floats alone [n, 2 ne + nqkv + nq + 3 n_ff] pass glibc's mmap threshold here: carved from
    the context's kept buffer (lp_layers_work_bytes), a prompt after the first faults few pages, not the
    region's every page; the logits are the bits of a context that keeps none (its own malloc'd ones),
    the kept bytes filled with NaN between prompts (nothing read before it is written)."""
    model = llamapy.Model.load(gemma3_path)
    hp, fused = model.hparams, model.net.fused
    assert fused is not None and fused.det_covered
    d = hp.n_embd_head_k
    nq, nqkv = hp.n_head * d, (hp.n_head + 2 * hp.n_head_kv) * d
    per_row = 4 * (2 * hp.n_embd + nqkv + nq + 3 * hp.n_ff)  # layers.c's floats a row (the partials aside)
    n = MMAP_THRESHOLD // per_row + 1
    floats = n * per_row
    assert floats >= MMAP_THRESHOLD  # malloc'd, each call a fresh mapping
    p = llamapy.ContextParams(n_ctx=1024, n_batch=1024, n_ubatch=1024, n_threads=2, deterministic=True)
    ref, kept = llamapy.Context(model, p), llamapy.Context(model, p)
    ref.work = None
    faults, calls0 = [], fused.calls
    for rep in range(2):  # the second prompt over the first's NaN: the ref context decodes that one only
        for ctx in (ref, kept) if rep else (kept,):
            b = llamapy.Batch()
            for i in range(n):
                b.add((7 + 31 * i + rep) % model.n_vocab, i, (0,), logits=i == n - 1)
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            ctx.decode(b)
            if ctx is kept:
                faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        assert kept.work.nbytes >= floats  # the region came from the kept buffer
        with torch.inference_mode():  # stale bytes for the next prompt
            kept.work.take_bytes(kept.work.nbytes).fill_(float("nan"))
        kept.memory.seq_rm(0, 0, -1)
    assert torch.equal(ref.get_logits(), kept.get_logits())
    assert fused.calls - calls0 == 3  # every prompt took the fused layers
    pages = floats // 4096
    print(f"{n} rows, faults per prompt {faults}, the region's floats {pages} pages")
    assert faults[1] < pages // 4, (faults, pages)
