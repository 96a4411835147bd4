"""`llamapy mem`'s estimate of the MoE rows kernel's working memory (memory/moe_work.py): its
bound on lp_xprep_bytes and lp_moe_rows_bytes holds the library's own sizes (the C functions,
called) for every routing tried, at real MoE shapes too (Qwen3-30B-A3B's, Mixtral's); and on tiny
qwen3moe and Mixtral-style files, after a prefill of a whole ubatch through the C path, the
estimate's MoeWork term holds what MoeWork really allocated, and its scratch term each thread's
lp_mm scratch."""
from __future__ import annotations

import ctypes

import gguf
import numpy as np
import pytest
import torch
from tiny_family import write_tiny_family

from llamapy.batch.batch import Batch
from llamapy.context import Context, ContextParams
from llamapy.kernels.build import int8_rows_expected, load_kernels
from llamapy.kernels.moe_row import moe_row_for
from llamapy.memory.estimate import estimate_memory
from llamapy.memory.moe_work import moe_rows_bound, moe_work_bytes, xprep_bound
from llamapy.model.model import Model

T = gguf.GGMLQuantizationType
# (n_embd, n_ff_exp, n_expert, k): tiny, Qwen3-30B-A3B, Mixtral 8x7B
SHAPES = [(64, 64, 8, 2), (2048, 768, 128, 8), (4096, 14336, 8, 2)]


@pytest.fixture(scope="module")
def c_sizes():
    k = load_kernels()
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off, so is the MoE rows kernel and its MoeWork")
    lib = ctypes.CDLL(str(k.path))  # its own function objects, with size_t / int64 returns
    xprep, rows, scratch = lib.lp_xprep_bytes, lib.lp_moe_rows_bytes, lib.lp_mm_scratch_bytes
    xprep.restype, xprep.argtypes = ctypes.c_size_t, [ctypes.c_int64, ctypes.c_int64]
    rows.restype = ctypes.c_int64
    rows.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    scratch.restype, scratch.argtypes = ctypes.c_size_t, [ctypes.c_int64]
    return xprep, rows, scratch, k.level


def _routings(n_t: int, n_expert: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """counts [n_expert] int64 of n_t rows each routed to k distinct experts: concentrated (k
    experts take every row), spread (slots round-robin over every expert), and random ones."""
    out = [np.bincount(np.arange(n_t * k) % k, minlength=n_expert), np.bincount(np.arange(n_t * k) % n_expert, minlength=n_expert)]
    for _ in range(4):
        sel = np.stack([rng.choice(n_expert, k, replace=False) for _ in range(n_t)])
        out.append(np.bincount(sel.ravel(), minlength=n_expert))
    return [c.astype(np.int64) for c in out]


@pytest.mark.parametrize("n_in", [64, 128, 768, 2048, 4096, 14336])
def test_xprep_bound_holds_the_library(c_sizes, n_in):
    xprep = c_sizes[0]
    for n in [*range(1, 41), 63, 64, 65, 100, 255, 512, 1024]:
        bound = xprep_bound(n_in, n, int8_rows_expected())
        assert xprep(n_in, n) <= bound, (n_in, n, xprep(n_in, n), bound)


@pytest.mark.parametrize("n_embd,n_ff,n_expert,k", SHAPES)
@pytest.mark.parametrize("n_t", [2, 7, 64, 512])
def test_moe_rows_bound_holds_every_routing(c_sizes, n_embd, n_ff, n_expert, k, n_t):
    rows = c_sizes[1]
    rng = np.random.default_rng(n_t)
    worst = 0
    for counts in _routings(n_t, n_expert, k, rng):
        assert counts.sum() == n_t * k and counts.max() <= n_t
        worst = max(worst, rows(n_t, n_expert, counts.ctypes.data, n_embd, n_ff))
    bound = moe_rows_bound(n_t, n_expert, k, n_embd, n_ff, int8_rows_expected())
    assert worst <= bound, (worst, bound)
    # not a loose bound at a real prompt's size: at 512 rows it counts the AVX2 level's int8 rows
    # (lanes8, det8's x8) only where the library lays them out; the scalar library lays out no
    # lanes at all (1.59-1.86x)
    if n_t >= 512 and c_sizes[3] != "scalar":
        assert bound < 1.25 * worst, (worst, bound, c_sizes[3])


@pytest.mark.slow
@pytest.mark.parametrize("arch,wt,n_expert,k", [("qwen3moe", T.Q8_0, 16, 4), ("llama", T.F16, 4, 2)])
def test_estimate_holds_moe_work_after_a_prefill(c_sizes, tmp_path, arch, wt, n_expert, k):
    m = Model.load(write_tiny_family(tmp_path / "m.gguf", arch, wt, n_expert=n_expert, n_expert_used=k))
    hp = m.hparams
    assert all(moe_row_for(L.moe) is not None for L in m.net.layers), "the C path applies to this model"
    params = ContextParams(n_ctx=256, n_batch=256, n_ubatch=256)
    est = estimate_memory(m, params)
    terms = {t.name: t for t in est.compute_terms}
    work = terms["ffn_moe_work (MoeWork: lp_moe_rows' bytes, kept)"]
    scratch = terms["ffn_moe_rows scratch (lp_mm, per thread)"]
    assert work.phase == "persistent" and work.bytes == moe_work_bytes(256, torch.get_num_threads(), k, hp.n_ff_exp,
                                                                     hp.n_embd, n_expert, int8_rows_expected())[0]
    ctx = Context(m, params)
    b = Batch()
    for pos, tok in enumerate(np.random.default_rng(0).integers(3, m.n_vocab, 256).tolist()):
        b.add(tok, pos, [0], logits=pos == 255)
    ctx.decode(b)  # one ubatch of 256 rows: every MoE layer through lp_moe_rows
    buf = m.net.moe_work.get(0)  # this thread's buffer, as the layers grew it
    assert buf.numel() > 0 and buf.numel() <= work.bytes, (buf.numel(), work.bytes)
    wide = max(hp.n_embd, hp.n_ff_exp)
    assert torch.get_num_threads() * c_sizes[2](wide) <= scratch.bytes


def test_no_moe_work_where_the_rows_kernel_does_not_run(tmp_path):
    """One-row ubatches take the decode kernel (no MoeWork); gpt-oss's experts the per-expert path."""
    q3 = write_tiny_family(tmp_path / "q3.gguf", "qwen3moe", T.Q8_0, n_expert=8)
    oss = write_tiny_family(tmp_path / "oss.gguf", "gpt-oss", T.F16, seed=2)
    for path, n_ubatch, want in ((q3, 1, False), (q3, 2, load_kernels() is not None), (oss, 256, False)):
        est = estimate_memory(path, ContextParams(n_ctx=256, n_batch=256, n_ubatch=n_ubatch))
        assert any(t.name.startswith("ffn_moe_work") for t in est.compute_terms) == want, (path.name, n_ubatch)
