"""A multi-row ubatch's MoE FFN in one C call (kernels/c/moe_rows.c, MoeRow.add_rows) against
model/moe.py's per-expert loop on the same tiny models: rows routed to different experts in one
ubatch, k > 1, the same output within the products' rounding; and a prefill gives the same logits
with it on and off (LLAMAPY_MOE_C=0)."""
from __future__ import annotations

import gguf
import pytest
import torch
from kernel_level import kernels_at
from tiny_family import write_tiny_family

from llamapy.batch.batch import Batch
from llamapy.context import Context, ContextParams
from llamapy.kernels.moe_row import moe_row_for
from llamapy.model.layers import rms_norm
from llamapy.model.model import Model

T = gguf.GGMLQuantizationType


@pytest.mark.parametrize("arch,n_expert,k,wt", [("qwen3moe", 16, 4, T.Q8_0), ("llama", 4, 2, T.F16),
                                                ("qwen3moe", 8, 2, T.IQ4_NL)])
@pytest.mark.parametrize("n_tokens", [2, 7, 40])
def test_c_rows_equal_the_per_expert_loop(tmp_path, arch, n_expert, k, wt, n_tokens):
    m = Model.load(write_tiny_family(tmp_path / "m.gguf", arch, wt, n_expert=n_expert, n_expert_used=k))
    hp = m.hparams
    g = torch.Generator().manual_seed(n_tokens)
    for L in m.net.layers:
        moe = L.moe
        row = moe_row_for(moe)
        assert row is not None, "the C path applies to this model"
        for _ in range(3):
            x = rms_norm(torch.randn(n_tokens, hp.n_embd, generator=g) * 2, L.ffn_norm, hp.f_norm_rms_eps)
            y0 = torch.randn(n_tokens, hp.n_embd, generator=g)
            _, sel = moe.route(x)
            assert len(set(sel.reshape(-1).tolist())) > 1, "the rows pick different experts"
            moe.row_c = row
            y_c = moe.add_into(x, y0.clone())
            moe.row_c = None  # the per-expert loop
            y_py = moe.add_into(x, y0.clone())
            torch.testing.assert_close(y_c, y_py, rtol=1e-5, atol=1e-5)


def _prefill_logits(path, monkeypatch, c_on: bool) -> torch.Tensor:
    monkeypatch.setenv("LLAMAPY_MOE_C", "1" if c_on else "0")
    m = Model.load(path)
    ctx = Context(m, ContextParams(n_ctx=64))
    b = Batch()
    toks = [5, 17, 101, 33, 250, 9, 77, 140, 3, 60]
    for pos, tok in enumerate(toks):
        b.add(tok, pos, [0], logits=True)
    ctx.decode(b)
    assert all((L.moe.row_c is not None) == c_on for L in m.net.layers)
    return torch.stack([ctx.get_logits_ith(i).clone() for i in range(len(toks))])


def test_prefill_with_and_without_the_c_rows(tmp_path, monkeypatch):
    path = write_tiny_family(tmp_path / "m.gguf", "qwen3moe", T.Q8_0, n_expert=16, n_expert_used=4)
    on, off = _prefill_logits(path, monkeypatch, True), _prefill_logits(path, monkeypatch, False)
    torch.testing.assert_close(on, off, rtol=1e-4, atol=1e-4)
    assert torch.equal(on.argmax(-1), off.argmax(-1))


# n_embd, n_ff (both multiples of 256: the int8 tiles' rows), the experts' types and rows
K_SHAPE = (512, 256)
K_TYPES = {"Q4_K/Q5_K/Q6_K": (T.Q4_K, T.Q5_K, T.Q6_K), "Q4_K/Q4_K/Q4_K": (T.Q4_K, T.Q4_K, T.Q4_K)}
MOE_Q8_ROWS = 4  # kernels/c/moe_rows.c: an expert's rows from which the AVX2 level takes the int8 tiles


def _k_lib(level: str):
    return kernels_at(level)


def _expert_product(lib, level: str, qtype: T, w: torch.Tensor, shape, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """One expert's product of its rows x [c, n_in] as lp_moe_rows takes it at this level: at avx2
    from MOE_Q8_ROWS rows lp_mm_q8 (residual pass or int8 alone: lp_q8mm_mode's answer on the
    expert's own rows), else lp_mm (the lanes, the fp32 tiles, the one-row products); (y, mode)."""
    y = torch.empty(x.shape[0], shape[0])
    mode = lib.fn.lp_q8mm_mode(int(qtype), x.data_ptr(), shape[1], x.shape[0])
    if level == "avx2" and x.shape[0] >= MOE_Q8_ROWS and mode:
        was = lib.fn.lp_q8p_set(0)  # (the experts keep these int8 rows: no Q8_K panel, q8p_x86.c, in lp_moe_rows yet)
        try:
            assert lib.fn.lp_mm_q8(int(qtype), w.data_ptr(), *shape, x.data_ptr(), x.shape[0], y.data_ptr(), shape[0], 0,
                                   int(mode == 1)) == 0
        finally:
            lib.fn.lp_q8p_set(was)
        return y, mode
    assert lib.fn.lp_mm(int(qtype), w.data_ptr(), *shape, x.data_ptr(), x.shape[0], y.data_ptr(), shape[0], 0) == 0
    return y, 0


@pytest.mark.parametrize("types", list(K_TYPES), ids=list(K_TYPES))
@pytest.mark.parametrize("level", ["avx2", "avx512", "scalar"])
def test_k_quant_experts_take_the_levels_products(level, types):
    """K-quant experts straight through lp_moe_rows (no router: the slots are laid out here) equal,
    bit for bit, each expert's own product of its rows and the weighted sum in slot order: at the
    AVX2 level the int8 tiles from MOE_Q8_ROWS rows -- the residual pass for an expert of plain
    rows, int8 alone for one of outlier-heavy rows (every block spiked), gate Q4_K and up Q5_K
    from one rounding of the rows (each with its own int16 depth) -- and the int16 lanes (or the fp32 tiles) below; elsewhere
    every expert as lp_mm."""
    from test_kernels import _matrix
    lib = _k_lib(level)
    n_embd, n_ff = K_SHAPE
    tg, tu, td = K_TYPES[types]
    n_expert, n_tokens = 5, 24
    mats = [[_matrix(t, shape, seed=10 * e + j)[0] for e in range(n_expert)]
            for j, (t, shape) in enumerate(((tg, (n_ff, n_embd)), (tu, (n_ff, n_embd)), (td, (n_embd, n_ff))))]
    stacks = [torch.cat(ms) for ms in mats]  # each 3-D tensor's experts contiguous
    x = torch.randn(n_tokens, n_embd, generator=torch.Generator().manual_seed(1))
    x[10:18, ::32] *= 60  # rows 10..17: every block an outlier
    x[5] = 1.0  # every value 127 once rounded: Q5_K's int16 sums at their largest (4 steps, not Q4_K's 8)
    # expert 0 inactive; 1: ten plain rows; 2: the eight spiked rows; 3: three rows; 4: every row
    slots = [[], list(range(10)), list(range(10, 18)), [3, 12, 20], list(range(n_tokens))]
    counts = torch.tensor([len(s) for s in slots], dtype=torch.int64)
    rows = torch.tensor([r for s in slots for r in s], dtype=torch.int64)
    w = torch.rand(rows.numel(), generator=torch.Generator().manual_seed(2))
    y0 = torch.randn(n_tokens, n_embd)
    y = y0.clone()
    strides = [ms[0].numel() for ms in mats]
    assert lib.fn.lp_moe_rows(x.data_ptr(), n_tokens, n_expert, counts.data_ptr(), rows.data_ptr(), w.data_ptr(),
                              *(s.data_ptr() for s in stacks), int(tg), int(tu), int(td), *strides, n_embd, n_ff,
                              y.data_ptr(), None, 0) == 0
    out, modes, s0 = torch.zeros(n_tokens, n_embd), {}, 0
    for e, sl in enumerate(slots):
        if not sl:
            continue
        xe = x[sl].contiguous()
        g, modes[e, "gate"] = _expert_product(lib, level, tg, mats[0][e], (n_ff, n_embd), xe)
        u, _ = _expert_product(lib, level, tu, mats[1][e], (n_ff, n_embd), xe)
        h = torch.empty_like(g)
        lib.fn.lp_glu_rows(g.data_ptr(), n_ff, u.data_ptr(), n_ff, len(sl), n_ff, 0, h.data_ptr())
        t, modes[e, "down"] = _expert_product(lib, level, td, mats[2][e], (n_embd, n_ff), h)
        for i, r in enumerate(sl):  # slot order, as the kernel's scatter-add
            out[r] += t[i] * w[s0 + i]
        s0 += len(sl)
    assert torch.equal(y, y0 + out)
    if level == "avx2":  # the int8 tiles ran, both ways, and the lanes for the 3-row expert
        assert modes[1, "gate"] == 1 and modes[2, "gate"] == 2 and modes[3, "gate"] == 0, modes


# the experts' types (gate, up, down) of the AMX test: 32-blocks with and without minima, the
# 16-group Q6_K, and IQ4_NL (no int16 unpacking: the canonical form's int8 rows)
AMX_TYPES = {"Q4_K/Q5_K/Q6_K": (T.Q4_K, T.Q5_K, T.Q6_K), "Q8_0/Q5_0/IQ4_NL": (T.Q8_0, T.Q5_0, T.IQ4_NL),
             "Q5_1/Q5_1/Q6_K": (T.Q5_1, T.Q5_1, T.Q6_K)}
MOE_AMX_ROWS = 16  # kernels/c/moe_rows.c: an expert's rows from which AMX's tiles take the lanes' products


def _experts_case(lib, types: tuple, counts_l: list[int], n_tokens: int, seed: int, outlier_row: int = -1):
    """Experts of K_SHAPE in (gate, up, down) `types`, counts_l rows each (random tokens), and a
    call of lp_moe_rows adding their weighted outputs into y [n_tokens, n_embd]; returns it
    and the generator (its later draws the test's own)."""
    from test_kernels import _matrix
    n_embd, n_ff = K_SHAPE
    tg, tu, td = types
    n_expert = len(counts_l)
    mats = [[_matrix(t, shape, seed=10 * e + j)[0] for e in range(n_expert)]
            for j, (t, shape) in enumerate(((tg, (n_ff, n_embd)), (tu, (n_ff, n_embd)), (td, (n_embd, n_ff))))]
    stacks = [torch.cat(ms) for ms in mats]
    strides = [ms[0].numel() for ms in mats]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_tokens, n_embd, generator=g)
    if outlier_row >= 0:
        x[outlier_row, ::32] *= 50  # an outlier-heavy row: its blocks' int16 rows at their largest
    counts = torch.tensor(counts_l, dtype=torch.int64)
    rows = torch.cat([torch.randperm(n_tokens, generator=g)[:c] for c in counts_l])
    w = torch.rand(rows.numel(), generator=g)

    def run(y: torch.Tensor) -> None:
        assert lib.fn.lp_moe_rows(x.data_ptr(), n_tokens, n_expert, counts.data_ptr(), rows.data_ptr(), w.data_ptr(),
                                  *(s.data_ptr() for s in stacks), int(tg), int(tu), int(td), *strides, n_embd,
                                  n_ff, y.data_ptr(), None, 0) == 0

    return run, g


@pytest.mark.parametrize("types", list(AMX_TYPES), ids=list(AMX_TYPES))
def test_amx_experts_equal_the_lanes(types):
    """Where the CPU has AMX-INT8 (and Linux grants it), an expert's rows that take the lanes
    take amxw_x86.c's tiles from MOE_AMX_ROWS rows: the same integers and float steps, so
    lp_moe_rows' output equals, bit for bit, the same call with the experts' tiles switched off
    (lp_moe_rows_amx(0): the lanes) -- for experts of 16 rows (one group of 16), 17 and 33 (a
    last group of one row), 47, 3 and 15 (the lanes' bounds: below them other products), none.
    The lanes' side with q8kz_x86.c off: off AMX, 16-127 rows of Q4_K / Q6_K read Q8_K."""
    lib = _k_lib("avx512")
    if not lib.fn.lp_amx_on():
        pytest.skip(f"{lib.isa}: no AMX-INT8 tiles (the CPU, the build or Linux): the experts stay in the lanes")
    n_tokens = 48
    run, g = _experts_case(lib, AMX_TYPES[types], [16, 17, 0, 33, 3, 47, 15], n_tokens, seed=3, outlier_row=7)
    y0 = torch.randn(n_tokens, K_SHAPE[0], generator=g)
    out = {}
    try:
        for on in (0, 1):
            assert lib.fn.lp_moe_rows_amx(on) == on
            lib.fn.lp_q8kz_set(on)  # (the lanes: 16-127 rows of Q4_K / Q6_K read Q8_K at AVX-512 VNNI otherwise)
            out[on] = y0.clone()
            run(out[on])
    finally:
        lib.fn.lp_moe_rows_amx(1)
        lib.fn.lp_q8kz_set(1)
    assert not torch.equal(out[1], y0), "the experts added something"
    assert torch.equal(out[1], out[0]), f"largest difference {(out[1] - out[0]).abs().max():.3g}"


def test_experts_of_dense_rows_keep_the_integer_products():
    """An expert of LP_DENSE_ROWS (128)+ rows, prepared by lp_xprep_at, reads the integer form
    whether amxk_x86.c (the dense layers' Q4_K / Q5_K prompts, lp_mm_for) is on or off: the
    output is bit for bit the same.  (amxk's choice once left such experts without a form they
    could read, so they fell to the fp32 tiles: other bits, and the Qwen3-30B-A3B shape's pp512
    at 0.4-0.6x its speed on an Intel Xeon with AMX.)"""
    lib = _k_lib("avx512")
    if not lib.fn.lp_amx_on():
        pytest.skip(f"{lib.isa}: no AMX-INT8 tiles (the CPU, the build or Linux): no amxk to choose")
    n_tokens = 160
    run, _ = _experts_case(lib, (T.Q4_K, T.Q4_K, T.Q6_K), [130, 16, 0, 2], n_tokens, seed=5)
    out = {}
    try:
        for on in (0, 1):
            assert lib.fn.lp_amxk_set(on) == on
            out[on] = torch.zeros(n_tokens, K_SHAPE[0])
            run(out[on])
    finally:
        lib.fn.lp_amxk_set(1)
    assert out[1].abs().max() > 0, "the experts added something"
    assert torch.equal(out[1], out[0]), f"largest difference {(out[1] - out[0]).abs().max():.3g}"
