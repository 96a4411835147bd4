"""ffn_down's input (the SwiGLU / GeGLU rows) in ggml's Q8_K whatever its largest value, as
llama.cpp rounds it: lp_prepare_q8k_row's outlier rule (a block over 8x its rms keeps the row
in int16) stays for the hidden state, not for these rows.  The per-op path's lp_mm_glu
(BlockMatrix.glu_in, model/block_matrix.py glu_input) and the fused layers (kernels/c/layers.c
prep_ff_row) alike.  Where this library's level reads no Q8_K for the rows (scalar, VNNI, not
x86), skipped."""
from __future__ import annotations

import gguf
import pytest
import torch
from test_fused_layers import _run
from test_kernels import _matrix, q8k_rounded
from tiny_model import write_tiny_llama

from llamapy import ContextParams, Model
from llamapy.kernels import load_kernels
from llamapy.model.block_matrix import BlockMatrix

T = gguf.GGMLQuantizationType
N_IN, N_OUT = 512, 64


def _lib_reading_q8k(qtype: T, n: int):
    lib = load_kernels()
    if lib is None:
        pytest.skip("no CPU kernels")
    probe = torch.randn(n, N_IN, generator=torch.Generator().manual_seed(1))
    if not lib.fn.lp_q8k_takes(int(qtype), probe.data_ptr(), N_IN, n):
        pytest.skip(f"{lib.isa}: {n} {qtype.name} rows are not read in Q8_K at this level")
    return lib


@pytest.mark.parametrize("n", [1, 2, 16])
@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_mm_glu_reads_q8k_with_outliers(qtype, n):
    lib = _lib_reading_q8k(qtype, n)
    x = torch.randn(n, N_IN, generator=torch.Generator().manual_seed(2))
    x[:, 5] = 40.0  # every row's first block: its largest |x| far over 8x its rms (the rule keeps int16)
    raw, W = _matrix(qtype, (N_OUT, N_IN), seed=4)
    want = q8k_rounded(x).double() @ W.double().T
    exact = x.double() @ W.double().T
    for fn, close_to in ((lib.fn.lp_mm_glu, want), (lib.fn.lp_mm, exact)):
        y = torch.zeros(n, N_OUT)
        assert fn(int(qtype), raw.data_ptr(), N_OUT, N_IN, x.data_ptr(), n, y.data_ptr(), N_OUT, 0) == 0
        gap = (want - exact).abs().max().item()
        assert gap > 1e-3 * exact.abs().max().item()  # Q8_K's rounding shows against the exact sums
        assert (y.double() - close_to).abs().max().item() < 0.05 * gap, fn


def _glu_in(model: Model, on: bool) -> int:
    n = 0
    for L in model.net.layers:
        if isinstance(L.ffn_down, BlockMatrix):
            L.ffn_down.glu_in, n = on, n + 1
    return n


@pytest.mark.parametrize("n_seq", [1, 16])
def test_fused_ffn_down_reads_q8k(tmp_path, n_seq):
    """The fused steps are the per-op path's with lp_mm_glu bit for bit, and not its steps with
    lp_mm (the rule): some SwiGLU row here has an outlier block, so the fused layers force Q8_K.
    (Q6_K: the tiny Q4_K files of seeds 0-3 and 5 had no such row, both paths the same.)"""
    qtype = T.Q6_K
    _lib_reading_q8k(qtype, n_seq)
    path = write_tiny_llama(tmp_path / f"{qtype.name}.gguf", n_embd=256, n_head=4, n_head_kv=2, n_ff=512,
                            weight_type=qtype)
    m = Model.load(path)
    assert m.net.fused is not None and _glu_in(m, True) == 2
    p = ContextParams(n_ctx=1024, n_seq_max=n_seq, kv_unified=True)
    y_fused, calls = _run(m, True, p, n_seq, prompt=3, steps=4)
    assert calls >= 4
    y_glu, _ = _run(m, False, p, n_seq, prompt=3, steps=4)
    _glu_in(m, False)
    y_rule, _ = _run(m, False, p, n_seq, prompt=3, steps=4)
    assert torch.equal(y_fused, y_glu)
    assert not torch.equal(y_fused, y_rule)
