"""llamapy's CPU kernels (kernels/c/) against PyTorch and gguf's own arithmetic, on every ISA
level this CPU runs: the AVX-512 build (skipped, with the reason, where the CPU lacks
AVX-512), the AVX2 build, and the portable one (scalar), for every GGUF type they read."""
from __future__ import annotations

import contextlib
import ctypes
import json
import shutil

import gguf
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from llamapy.kernels import load_kernels
from llamapy.kernels import ops as kops
from llamapy.kernels.build import KernelLib, bind_signatures, cpu_features, kernel_level, resolve_level, system_info, IsaError
from llamapy.kernels.calibrate import CALIBRATION, CoarseChoice, calibrate_coarse_bf16, record_path, recorded_choice
from llamapy.kernels.types import Q8MM_MAX_FLAGGED, Q8MM_RATIO, Q8MM_ROWS, bf16_gemm, c_kv_types, mm_scratch_bound
from llamapy.model.block_matrix import DENSE_ROWS, block_matrix, dense_dtype
from llamapy.model.rope import ROPE_TYPE_NEOX, ROPE_TYPE_NORM, RopeParams, apply_rope, rope_cos_sin

T = gguf.GGMLQuantizationType
X86_LEVELS = ("avx512", "avx2+vnni", "avx2", "scalar")
QUANT_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS,
               T.MXFP4]
FLOAT_TYPES = [T.F16, T.BF16, T.F32]
# byte offsets of the f16 scale fields inside one block of the types gguf cannot quantize
F16_FIELDS = {T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,), T.IQ4_NL: (0,),
              T.IQ4_XS: (0,)}


def machine_levels() -> list:
    """Every level to test here, each skipped (with why) where this CPU cannot run it."""
    machine, feats = cpu_features()
    levels = ("neon", "scalar") if machine in ("aarch64", "arm64") else X86_LEVELS
    out = []
    for lv in levels:
        try:
            resolve_level(lv, machine, feats)
            out.append(lv)
        except IsaError as e:
            out.append(pytest.param(lv, marks=pytest.mark.skip(reason=f"built, not run: {e}")))
    return out


@pytest.fixture(scope="module", params=machine_levels())
def lib(request):
    k = load_kernels(request.param)
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off (the PyTorch paths are tested elsewhere)")
    assert k.level == kernel_level(request.param)
    return k


def q8k_rounded(x: torch.Tensor) -> torch.Tensor:
    """x [rows, n] through ggml's Q8_K (quantize_row_q8_K_ref, in its float32 steps) and back:
    per 256 values the first of largest |x| is max, q = round(x * (-127 / max)) to nearest even
    capped at 127, times 1 / (-127 / max); what x86's Q4_K / Q6_K one-row products read without
    VNNI (kernels/c/row1q8k_x86.c, lp_q8k_takes), as llama.cpp's AVX2 build does."""
    xb = x.float().reshape(x.shape[0], -1, 256)
    mx = torch.gather(xb, -1, xb.abs().argmax(-1, keepdim=True))  # argmax: the first of the largest
    iscale = torch.where(mx != 0, -127.0 / mx, torch.zeros_like(mx))
    q = torch.round(iscale * xb).clamp(max=127)  # torch.round: to nearest even
    return (q * torch.where(mx != 0, 1.0 / iscale, torch.zeros_like(mx))).reshape(x.shape)


def q8_0_rounded(x: torch.Tensor) -> torch.Tensor:
    """x [rows, n] through ggml's Q8_0 form as det8_x86.c lp_x8_row makes it (float32 steps): per 32
    values max |x|, q = round(x * (127 / max)) to nearest even within +-127, times max / 127; what
    x86's one-row products of the 32-element types read (kernels/c/row1_x86.h lp_row1_i8)."""
    xb = x.float().reshape(x.shape[0], -1, 32)
    mx = xb.abs().amax(-1, keepdim=True)
    inv = torch.where(mx > 0, torch.tensor(127.0) / mx, torch.zeros_like(mx))
    q = torch.round(xb * inv).clamp(-127, 127)
    return (q * (mx / torch.tensor(127.0))).reshape(x.shape)


@contextlib.contextmanager
def lanes_only(lib):
    """Prompt-sized K-quant products in the int16 lanes, not on int8 activations (kernels/c/q8mm_x86.c,
    tests/test_q8mm.py) nor AMX's super-block scales (kernels/c/amxk_x86.c, tests/test_amxk.py):
    what the tests of the lanes pin."""
    lib.fn.lp_q8mm_set(0, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
    lib.fn.lp_amxk_set(0)
    try:
        yield
    finally:
        lib.fn.lp_q8mm_set(1, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
        lib.fn.lp_amxk_set(1)


def hand_packed(qtype: T, n_rows: int, n_in: int, seed: int) -> np.ndarray:
    """Random blocks of a type gguf cannot quantize (K-quants, IQ4_NL, IQ4_XS): random bytes with the f16 scale
    fields set to small positive halves, uint8 [n_rows, row bytes]."""
    be, bb = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, size=(n_rows * n_in // be, bb), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        h = rng.uniform(0.002, 0.03, size=len(b)).astype(np.float16)
        b[:, off : off + 2] = h.view(np.uint8).reshape(len(b), 2)
    return b.reshape(n_rows, -1)


def _matrix(qtype: T, shape, seed=0):
    """(raw bytes, gguf's dequantization as float32 [n_out, n_in]) of a random matrix."""
    if qtype in F16_FIELDS:
        q = hand_packed(qtype, *shape, seed)
    else:
        w = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        q = gguf.quants.quantize(w, qtype) if qtype != T.F32 else w
    raw = torch.from_numpy(np.ascontiguousarray(q)).view(torch.uint8).reshape(-1)
    ref = gguf.quants.dequantize(raw.numpy().reshape(shape[0], -1), qtype) if qtype != T.F32 else q
    return raw, torch.from_numpy(np.ascontiguousarray(ref, dtype=np.float32))


@pytest.mark.parametrize("qtype", QUANT_TYPES + FLOAT_TYPES, ids=lambda t: t.name)
def test_dequant_and_rows_exact(lib, qtype):
    shape = (80, 512)
    raw, ref = _matrix(qtype, shape)
    m = block_matrix([(raw, qtype, shape)], lib)
    assert m.nbytes == raw.numel()  # the file's bytes, nothing more
    assert torch.equal(m.dequant(), ref)
    assert torch.equal(m.dequant(torch.float32, 16, 48), ref[16:48])
    assert torch.equal(m.dequant(torch.bfloat16), ref.bfloat16())  # round to nearest even, as torch
    ids = torch.tensor([79, 0, 5, 5])
    assert torch.equal(m.get_rows(ids), ref[ids])
    with pytest.raises(IndexError, match=r"\[0, 80\)"):
        m.get_rows(torch.tensor([80]))


@pytest.mark.parametrize("qtype", QUANT_TYPES + FLOAT_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 12, 16, 17, DENSE_ROWS - 1, DENSE_ROWS + 3])  # ints 1..8, tiles, ints, dense
def test_matmul_against_exact_product(lib, qtype, rows):
    n_in = 512 if gguf.GGML_QUANT_SIZES[qtype][0] == 256 else 160  # n_in an odd number of blocks of 32
    shape = (72, n_in)  # not a multiple of the 16-row chunks
    raw, W = _matrix(qtype, shape, seed=rows)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(rows, shape[1], generator=torch.Generator().manual_seed(1))
    ref = (x.double() @ W.double().T).float()
    y = m(x)
    scale = ref.abs().max().item()
    # 1-8 and 16+ rows: int16 activations (block types; on x86 from 5 rows in vector lanes, a
    # part-filled last group at 5, 17 and 127) or exact fp32 (float types); 9-15: fp32; from 5
    # rows bf16 products where the CPU multiplies bf16 natively and the type is a coarse one;
    # the K-quants' 131 rows with AVX512-VNNI int8 activations (one scale per 32: about 1/254
    # of a block's largest value, test_q8mm.py holds the integers); Q4_K / Q5_K / Q6_K's 131 rows on
    # AMX ggml's Q8_K (one int8 scale per 256, kernels/c/amxk_x86.c: test_amxk.py holds the sums)
    # (5..DENSE_ROWS - 1 rows follow the calibrated few-row choice, more rows the many-row one: both timed,
    # kernels/calibrate.py, so either may be bf16 on a given machine)
    bf16 = rows >= 5 and bf16_gemm(qtype, lib.bf16, lib.coarse_bf16 if rows < DENSE_ROWS else lib.coarse_many_bf16)
    q8 = lib.fn.lp_q8mm_takes(int(qtype), x.data_ptr(), shape[1], rows)
    amxk = lib.amx and qtype in (T.Q4_K, T.Q5_K, T.Q6_K) and rows >= DENSE_ROWS
    # the 4- and 5-bit 32-element types' 5-8 and 16+ rows at AVX2 without VNNI: x as ggml's Q8_0 in int8
    # lanes (test_lanes8.py holds them to that rounding)
    l8 = not q8 and lib.fn.lp_lanes8_takes(int(qtype), shape[1], rows)
    tol = 1e-2 if bf16 or q8 or amxk or l8 else 1e-4
    if not q8 and lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), shape[1], rows):  # x86, 1-4 rows of Q4_K / Q6_K
        # (and 5-63 at AVX2, 16-127 at AVX-512 VNNI, where the int8 panels do not take them first): x as llama.cpp's Q8_K
        ref, tol = (q8k_rounded(x).double() @ W.double().T).float(), 1e-5
    if rows == 1 and lib.fn.lp_row1_i8(int(qtype), shape[1]):  # x86, one row of a 32-element type: x as ggml's Q8_0
        ref, tol = (q8_0_rounded(x).double() @ W.double().T).float(), 1e-5
    assert (y - ref).abs().max().item() <= tol * scale
    acc = torch.ones(rows, shape[0])
    m.add_into(x, acc)  # the residual add fused into the product
    assert (acc - 1 - y).abs().max().item() <= 1e-5 * scale


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_few_rows_are_the_integer_products(lib, qtype):
    """5-8 rows (a server step of 8 slots, a verification) take the integer products of one row
    and of 16: on AVX-512 two weight rows share a vector (twin lanes), at AVX2 one lane group,
    elsewhere row by row.  Each of those rows is bit for bit the same row of a 16-row product
    (the same integers and float steps), and within fp32 order of the one-row products."""
    if qtype in (T.Q4_0, T.Q4_1) and lib.coarse_bf16:
        pytest.skip("this bf16 CPU multiplies 5+ rows of the coarse types in bf16 (kernels/calibrate.py)")
    shape = (45, 512)  # an odd number of weight rows: the last twin pair is one row with itself
    raw, _ = _matrix(qtype, shape, seed=4)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(16, shape[1], generator=torch.Generator().manual_seed(3))
    was = lib.fn.lp_q8kz_set(0)  # (AVX-512 VNNI: 2+ rows of Q4_K / Q6_K read Q8_K, test_q8kz.py; here the lanes)
    try:
        y16 = m(x)
        ys = {rows: m(x[:rows]) for rows in (5, 7, 8)}
    finally:
        lib.fn.lp_q8kz_set(was)
    one = torch.cat([m(x[r:r + 1]) for r in range(16)])
    # one row of Q4_K / Q6_K reads x as Q8_K on x86, one row of the 32-element types as Q8_0
    # (test_matmul_against_exact_product holds them to llama.cpp's products): not the int16
    # integers of 5+ rows
    q8k = lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), shape[1], 1) or lib.fn.lp_row1_i8(int(qtype), shape[1])
    q8k = q8k or lib.fn.lp_lanes8_takes(int(qtype), shape[1], 5)  # (AVX2 without VNNI: 5+ rows as Q8_0, test_lanes8.py)
    for rows, y in ys.items():
        assert torch.equal(y, y16[:rows]), rows
        if q8k:
            continue
        # (x86's one-row Q4_0 reads nibbles 0..15 with a minimum of -8 d: rounding ~8x the result's)
        torch.testing.assert_close(y, one[:rows], rtol=1e-5, atol=5e-5 * one.abs().max().item())


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_q8k_rows_keep_outliers_at_int16(lib, qtype):
    """1-4 rows of Q4_K / Q6_K read x as Q8_K at x86 without VNNI (8 bits per 256 values), but a
    row with a block of 256 whose largest |x| is over 8 times its root mean square (Gemma 3's
    few huge channels) keeps the int16 form: that row is the exact product within 1e-4, the
    others llama.cpp's Q8_K product."""
    shape = (72, 512)
    raw, W = _matrix(qtype, shape, seed=9)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(3, shape[1], generator=torch.Generator().manual_seed(10))
    x[1, 300] = 40.0  # one value dominating row 1's second block
    y = m(x)
    exact = (x.double() @ W.double().T).float()
    scale = exact.abs().max(-1, keepdim=True).values
    assert not lib.fn.lp_q8k_takes(int(qtype), x[1:2].data_ptr(), shape[1], 1)
    assert ((y[1] - exact[1]).abs().max() <= 1e-4 * scale[1]).item()
    if lib.fn.lp_q8k_takes(int(qtype), x[0:1].data_ptr(), shape[1], 1):
        q8k = (q8k_rounded(x).double() @ W.double().T).float()
        assert ((y[[0, 2]] - q8k[[0, 2]]).abs().max(-1).values <= 1e-5 * scale[[0, 2], 0]).all()
        assert ((y[0] - exact[0]).abs().max() > 1e-4 * scale[0]).item()  # (Q8_K's coarser rounding shows)
    else:
        assert ((y - exact).abs().max(-1).values <= 1e-4 * scale[:, 0]).all()


def test_q8k_batched_rows_are_each_their_own(lib):
    """x86 without VNNI reads 5 to Q8MM_ROWS - 1 rows of Q6_K (a batched decode of 16 sequences)
    as ggml's Q8_K, as llama.cpp's AVX2 build does (kernels/c/mm.c q8k_chunk, q8k4_x86.c: four
    weight rows interleaved a pass): every row bit for bit the same at every row count (its
    integers and float steps its own, so a sequence's logits do not depend on how many others
    share its batch), within fp32 order of the Q8_K product, and of its one-row product (the
    one-row kernel's order: row1q8k_x86.c).  A row with an outlier block takes the int16 form
    (within 1e-4 of the exact product), the others still Q8_K; more than a quarter such rows
    send the whole product to int16.  45 weight rows: a last pass of one."""
    shape = (45, 2048)
    raw, W = _matrix(T.Q6_K, shape, seed=11)
    m = block_matrix([(raw, T.Q6_K, shape)], lib)
    x = torch.randn(63, shape[1], generator=torch.Generator().manual_seed(12))
    if not lib.fn.lp_q8k_takes(int(T.Q6_K), x.data_ptr(), shape[1], 5):
        pytest.skip(f"{lib.isa}: several rows of Q6_K in int16 (VNNI: AVX-512's 16+ rows in test_q8kz.py; or not x86)")
    one = torch.cat([m(x[r:r + 1]) for r in range(63)])
    q8k = (q8k_rounded(x).double() @ W.double().T).float()
    y63 = m(x)
    assert (one - q8k).abs().max().item() <= 1e-5 * q8k.abs().max().item()
    for n in (5, 8, 12, 16, 17, 33, 63):
        y = m(x[:n])
        assert torch.equal(y, y63[:n]), n
        assert (y - q8k[:n]).abs().max().item() <= 1e-5 * q8k.abs().max().item(), n
    x[3, 700] = 60.0  # one value dominating row 3's third block: that row in int16
    assert not lib.fn.lp_q8k_takes(int(T.Q6_K), x.data_ptr(), shape[1], 16)
    exact = (x.double() @ W.double().T).float()
    y = m(x[:16])
    assert (y[3] - exact[3]).abs().max().item() <= 1e-4 * exact[3].abs().max().item()
    keep = [r for r in range(16) if r != 3]
    assert torch.equal(y[keep], y63[keep])
    x[[5, 7, 9, 11], 100] = 60.0  # 5 of 16 rows: the whole product in int16
    exact = (x.double() @ W.double().T).float()
    assert ((m(x[:16]) - exact[:16]).abs().max(-1).values <= 1e-4 * exact[:16].abs().max(-1).values).all()


@pytest.mark.parametrize("qtype", [T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_lane_tail_rows(lib, qtype):
    """Rows past whole lane groups (a verification of 16 drafts: 17 rows; a 130-row ubatch) take
    a last group whose other lanes are zeros (lanes_x86.c lp_xlanes_fill).  Every row is bit for
    bit its row of 16-row products (each row's integers and float steps are its own), so no row
    count changes another row's sums; 40-49, 130, 143 rows: at AVX-512 passes of three lane groups and
    tails of 2 + 2 (mm_lanes.h lanes_pass_groups)."""
    old = lib.fn.lp_coarse_bf16()
    lib.fn.lp_set_coarse_bf16(0)  # the coarse types in integers too, whatever this CPU's timed choice
    try:
        shape = (45, 512)
        raw, _ = _matrix(qtype, shape, seed=5)
        m = block_matrix([(raw, qtype, shape)], lib)
        x = torch.randn(144, shape[1], generator=torch.Generator().manual_seed(6))

        def mm(rows: torch.Tensor) -> torch.Tensor:  # lp_mm itself, at any row count (no dense path)
            y = torch.empty(rows.shape[0], shape[0])
            m._mm(rows.contiguous(), y, accumulate=False, int8=0)
            return y

        ref = torch.cat([mm(x[i:i + 16]) for i in range(0, 144, 16)])
        # Q6_K below Q8MM_ROWS rows on x86 without VNNI: Q8_K rows (each its one-row product), from there the lanes
        q8k = bool(lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), shape[1], 16))
        with lanes_only(lib):
            lanes = mm(x) if q8k else ref
            for n in (17, 20, 24, 25, 31, 40, 47, 48, 49, 130, 143):
                assert torch.equal(mm(x[:n]), (lanes if n >= Q8MM_ROWS else ref)[:n]), n
    finally:
        lib.fn.lp_set_coarse_bf16(old)


def test_many_rows_take_the_lanes_whatever_the_few_row_flag(lib):
    """lp_mm multiplies DENSE_ROWS rows or more of a coarse type in the integer lanes even where
    the few-row flag says bf16 (kernels/c/lp.h LP_DENSE_ROWS: the caller chose the lanes for
    them, kernels/calibrate.py's many-row choice), and bf16 tiles up to one row fewer."""
    old = lib.fn.lp_coarse_bf16()
    shape = (45, 512)
    raw, _ = _matrix(T.Q4_1, shape, seed=8)
    m = block_matrix([(raw, T.Q4_1, shape)], lib)
    x = torch.randn(DENSE_ROWS, shape[1], generator=torch.Generator().manual_seed(9))

    def mm(rows: torch.Tensor, flag: int) -> torch.Tensor:
        lib.fn.lp_set_coarse_bf16(flag)
        y = torch.empty(rows.shape[0], shape[0])
        m._mm(rows.contiguous(), y, accumulate=False, int8=0)
        return y

    try:
        ints = torch.cat([mm(x[i:i + 16], 0) for i in range(0, DENSE_ROWS, 16)])
        assert torch.equal(mm(x, 1), ints)
        assert torch.equal(mm(x[:DENSE_ROWS - 1], 1), ints[:DENSE_ROWS - 1]) == (not lib.bf16)
    finally:
        lib.fn.lp_set_coarse_bf16(old)


def test_coarse_bf16_choice(monkeypatch):
    """On a CPU with AVX512-BF16 the coarse types' products of 5+ rows take bf16 or the integer
    lanes, whichever the library timed faster at load (kernels/calibrate.py);
    LLAMAPY_COARSE_BF16 forces it, for few rows and for many (DENSE_ROWS and more: the lanes or
    a bf16 GEMM).  0: the integers, each of 8 rows, and of a many-row product, bit for bit its
    row of a 16-row product; 1: bf16, within bf16's rounding of them and not the same sums."""
    machine, feats = cpu_features()
    try:
        resolve_level("avx512", machine, feats)
        base = load_kernels("avx512")
    except IsaError:
        base = None
    if base is None or not base.bf16:
        pytest.skip("no AVX512-BF16 here: the coarse types always take the integer products")
    shape = (45, 512)
    raw, _ = _matrix(T.Q4_1, shape, seed=4)
    x = torch.randn(DENSE_ROWS, shape[1], generator=torch.Generator().manual_seed(3))
    y = {}
    try:
        for forced in ("0", "1"):
            monkeypatch.setenv("LLAMAPY_COARSE_BF16", forced)
            load_kernels.cache_clear()
            lib = load_kernels("avx512")
            assert lib.coarse_bf16 == lib.coarse_many_bf16 == (forced == "1")
            m = block_matrix([(raw, T.Q4_1, shape)], lib)
            y[forced] = (m(x[:8]), m(x[:16]), m(x))
    finally:
        monkeypatch.delenv("LLAMAPY_COARSE_BF16")
        load_kernels.cache_clear()
        load_kernels("avx512")  # the timed choice again (the library's flag is one per process)
    assert torch.equal(y["0"][0], y["0"][1][:8])
    assert torch.equal(y["0"][2][:16], y["0"][1])
    for few in (0, 2):
        assert not torch.equal(y["1"][few], y["0"][few])
        assert (y["1"][few] - y["0"][few]).abs().max().item() <= 1e-2 * y["0"][few].abs().max().item()


def test_coarse_bf16_recorded(lib, tmp_path, monkeypatch):
    """The timed choices are written beside the library (the many-row one under oneDNN's ISA
    cap) and taken from there by the next load, without timing; LLAMAPY_COARSE_BF16 overrides
    them and writes nothing; an unreadable record, or one of an older timing (no or another
    CALIBRATION), is timed and written again.  (On a copy of the library: its own handle, flag
    and record.)"""
    copy = tmp_path / lib.path.name
    shutil.copy(lib.path, copy)
    fn = ctypes.CDLL(str(copy))
    bind_signatures(fn)
    mine = KernelLib(copy, fn, lib.level, lib.isa)
    monkeypatch.delenv("LLAMAPY_COARSE_BF16", raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # only the key: torch read the variable long ago
    timed = calibrate_coarse_bf16(mine)
    assert recorded_choice(copy) == timed and timed.few == bool(fn.lp_coarse_bf16())
    flipped = CoarseChoice(not timed.few, not timed.many)
    for older in ({}, {"v": CALIBRATION - 1}):  # an older timing's record: timed again, its keys dropped
        record_path(copy).write_text(json.dumps({**older, "few": int(flipped.few), "many": {"AVX2": int(flipped.many),
                                                                                              "OTHER": 1}}))
        assert recorded_choice(copy) is None
        assert calibrate_coarse_bf16(mine) == recorded_choice(copy)
        assert set(json.loads(record_path(copy).read_text())["many"]) == {"AVX2"}
    record_path(copy).write_text(json.dumps({"v": CALIBRATION, "few": int(flipped.few), "many": {"AVX2": int(flipped.many)}}))
    assert calibrate_coarse_bf16(mine) == flipped and flipped.few == bool(fn.lp_coarse_bf16())
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")  # another key: its own timing, the first kept
    other = calibrate_coarse_bf16(mine)
    rec = json.loads(record_path(copy).read_text())
    assert rec["many"] == {"AVX2": int(flipped.many), "AVX512_CORE_BF16": int(other.many)}
    monkeypatch.setenv("LLAMAPY_COARSE_BF16", "1")
    assert calibrate_coarse_bf16(mine) == CoarseChoice(True, True) and fn.lp_coarse_bf16() == 1
    assert json.loads(record_path(copy).read_text()) == rec
    monkeypatch.delenv("LLAMAPY_COARSE_BF16")
    record_path(copy).write_text("not json")
    assert calibrate_coarse_bf16(mine) == recorded_choice(copy)


@pytest.mark.parametrize("n_in", [32, 256, 576, 640, 1536, 2048, 6144])
def test_mm_scratch_bound(lib, n_in):
    """The memory estimate's bound on lp_mm's scratch per thread holds the library's own size."""
    scratch_bytes = ctypes.CDLL(str(lib.path)).lp_mm_scratch_bytes  # its own function object: size_t
    scratch_bytes.restype, scratch_bytes.argtypes = ctypes.c_size_t, [ctypes.c_int64]
    assert 0 < scratch_bytes(n_in) <= mm_scratch_bound(n_in)


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_lanes_past_the_chunk_buffer(lib, qtype):
    """lp_mm called with more rows than a chunk's output buffer holds (over 512; the model's
    BlockMatrix slices at lanes_slice_rows, so only a direct call reaches this): the lane
    tiles' rows go straight to y, a weight-row tail of 1..3 included.  Each row is bit for bit
    that row of a product in slices of at most 512 (a row's integers and float steps are its
    own), and within fp32 order of the exact product."""
    shape = (45, 256)  # 45: chunks of 16 end in a tile of one weight row; 256: a K-quant block
    raw, W = _matrix(qtype, shape, seed=7)
    blocks = torch.from_numpy(np.ascontiguousarray(raw).view(np.uint8).copy())
    x = torch.randn(600, shape[1], generator=torch.Generator().manual_seed(8))  # (a tail of 88: the lanes, not Q8_K)

    def mm(xs: torch.Tensor) -> torch.Tensor:
        y = torch.zeros(xs.shape[0], shape[0])
        assert lib.fn.lp_mm(int(qtype), blocks.data_ptr(), shape[0], shape[1], xs.data_ptr(), xs.shape[0],
                            y.data_ptr(), shape[0], 0) == 0
        return y

    q8kz = lib.fn.lp_q8kz_set(0)  # (the tail of 88 alone: AVX-512 VNNI's Q8_K rows, tests/test_q8kz.py)
    try:
        with lanes_only(lib):  # (AMX's super-block scales at 512 rows, the lanes' at 8: tests/test_amxk.py)
            y = mm(x)
            assert torch.equal(y, torch.cat([mm(x[:512].contiguous()), mm(x[512:].contiguous())]))
    finally:
        lib.fn.lp_q8kz_set(q8kz)
    ref = (x.double() @ W.double().T).float()
    assert (y - ref).abs().max().item() <= 1e-4 * ref.abs().max().item()


@pytest.mark.parametrize("qtype", [T.F16, T.BF16], ids=lambda t: t.name)
def test_float_weights_few_rows(lib, qtype):
    """F16 / BF16 weights against 5-8 rows (a verification of an F16 target's drafts): two
    weight rows a pass where the registers hold them, an odd last row alone; every row is
    the exact product within fp32 rounding, whatever the pairing."""
    shape = (45, 512)
    raw, W = _matrix(qtype, shape, seed=5)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(8, shape[1], generator=torch.Generator().manual_seed(6))
    tol = 1e-2 if dense_dtype(qtype, lib) == torch.bfloat16 else 1e-5  # a bf16 CPU's BF16: bf16 tiles
    for rows in (5, 6, 7, 8):
        ref = (x[:rows].double() @ W.double().T).float()
        assert (m(x[:rows]) - ref).abs().max().item() <= tol * ref.abs().max().item(), rows


@pytest.mark.parametrize("qtype", [T.F16, T.BF16], ids=lambda t: t.name)
def test_float_weights_row_groups(lib, qtype):
    """F16 / BF16 weights against 9-16 rows (a verification of 8-15 drafts): each weight-row
    pair against groups of rows, the last group of 1-8 rows.  Every row is the exact
    product within fp32 rounding, and each row's sum is the one of 5-8 rows: the first 8 rows
    of a 9..16-row product equal the 8-row product bit for bit, whatever follows them (45
    outputs: an odd last weight row; the threads split the outputs)."""
    shape = (45, 512)
    raw, W = _matrix(qtype, shape, seed=7)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(16, shape[1], generator=torch.Generator().manual_seed(8))
    bf16 = dense_dtype(qtype, lib) == torch.bfloat16  # a bf16 CPU's BF16: bf16 tiles from 5 rows
    tol = 1e-2 if bf16 else 1e-5
    y8 = m(x[:8])
    for rows in range(9, 17):
        y = m(x[:rows])
        ref = (x[:rows].double() @ W.double().T).float()
        assert (y - ref).abs().max().item() <= tol * ref.abs().max().item(), rows
        if not bf16:
            assert torch.equal(y[:8], y8), rows


def test_isa_levels_agree():
    """Every level this CPU runs gives the same products up to fp32 summation order (the
    integers are the same on every ISA), but 1-4 rows of Q4_K / Q6_K where a level reads x as
    Q8_K (lp_q8k_takes) and one row of the 32-element types where it reads Q8_0 (lp_row1_i8):
    those are llama.cpp's Q8_K / Q8_0 products up to fp32 order, as are 5-8 and 16+ rows of
    Q4_0 / Q4_1 / Q5_0 / Q5_1 at AVX2 without VNNI (lp_lanes8_takes)."""
    levels = [lv for lv in machine_levels() if isinstance(lv, str)]
    libs = [load_kernels(lv) for lv in levels]
    if None in libs:
        pytest.skip("no C compiler")
    for qtype, rows in ((T.Q4_1, 1), (T.Q6_K, 5), (T.Q5_0, 5), (T.F16, 5), (T.Q5_0, 1), (T.Q6_K, 1), (T.Q8_0, 8),
                        (T.Q6_K, 16), (T.Q8_0, 20), (T.Q4_K, 33), (T.Q5_0, 15)):  # 5-8, 16+ rows: x86's lanes
        shape = (48, 512)  # (several rows of Q4_1 multiply in bf16 where the CPU has it)
        raw, W = _matrix(qtype, shape, seed=3)
        x = torch.randn(rows, shape[1], generator=torch.Generator().manual_seed(2))
        ys = [block_matrix([(raw, qtype, shape)], k)(x) for k in libs]
        q8k = [bool(k.fn.lp_q8k_takes(int(qtype), x.data_ptr(), shape[1], rows)) for k in libs]
        i8 = [rows == 1 and bool(k.fn.lp_row1_i8(int(qtype), shape[1])) for k in libs]  # x86: x as Q8_0
        i8 = [i or bool(k.fn.lp_lanes8_takes(int(qtype), shape[1], rows)) for i, k in zip(i8, libs)]  # AVX2's int8 lanes
        y0 = ys[[q or i for q, i in zip(q8k, i8)].index(False)]
        for y, q, i in zip(ys, q8k, i8):
            want = (q8k_rounded(x).double() @ W.double().T).float() if q else y0
            want = (q8_0_rounded(x).double() @ W.double().T).float() if i else want
            torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K], ids=lambda t: t.name)
def test_amx_products_are_the_lanes(lib, qtype):
    """A prompt's products on AMX tiles (kernels/c/amx_x86.c: int16 activations split into two
    int8, a tdpbssd pair per block) are the lane products bit for bit: the same integers, the
    same float steps.  Row counts with a part-filled last tile of 16, an odd number of blocks
    of 32 (the last one alone in its 64-value step), a part-filled last chunk of 16 weight rows,
    the residual add; Q6_K (a scale per 16) stays in the lanes.  (Q4_K and Q5_K with amxk_x86.c's
    super-block scales switched off: its own sums, tests/test_amxk.py.)"""
    if not lib.amx:
        pytest.skip(f"{lib.isa}: prompt products in the lanes here (no AMX-INT8 in the build, the tile state "
                    "refused by Linux, or LLAMAPY_AMX=0)")
    lib.fn.lp_amxk_set(0)
    try:
        _amx_products_are_the_lanes(lib, qtype)
    finally:
        lib.fn.lp_amxk_set(1)


def _amx_products_are_the_lanes(lib, qtype: T) -> None:
    n_in = 512 if gguf.GGML_QUANT_SIZES[qtype][0] == 256 else 160
    for rows, n_out in ((128, 48), (141, 33), (300, 17)):
        raw, W = _matrix(qtype, (n_out, n_in), seed=rows)
        x = torch.randn(rows, n_in, generator=torch.Generator().manual_seed(rows))
        y = torch.empty(rows, n_out)
        acc = {}
        for on in (1, 0):
            assert lib.fn.lp_amx_set(on) == on
            try:
                assert lib.fn.lp_mm(int(qtype), raw.data_ptr(), n_out, n_in, x.data_ptr(), rows, y.data_ptr(), n_out, 0) == 0
                acc[on] = torch.ones(rows, n_out)
                assert lib.fn.lp_mm(int(qtype), raw.data_ptr(), n_out, n_in, x.data_ptr(), rows, acc[on].data_ptr(), n_out, 1) == 0
            finally:
                lib.fn.lp_amx_set(1)
            acc[on + 2] = y.clone()
        assert torch.equal(acc[3], acc[2]) and torch.equal(acc[1], acc[0])
        ref = (x.double() @ W.double().T).float()
        assert (acc[3] - ref).abs().max().item() <= 1e-4 * ref.abs().max().item()


def test_forced_level_the_cpu_lacks_is_a_clear_error():
    machine, feats = cpu_features()
    with pytest.raises(IsaError, match="lacks avx512f"):
        resolve_level("avx512", "x86_64", frozenset({"avx2", "fma", "f16c", "bmi2"}))
    with pytest.raises(IsaError, match="not ARM64"):
        resolve_level("neon", "x86_64", frozenset())
    with pytest.raises(IsaError, match="expected one of"):
        resolve_level("sse9", machine, feats)
    assert resolve_level("native", "x86_64", frozenset({"avx2", "fma", "f16c", "bmi2"})) == "avx2"
    assert resolve_level(None, "aarch64", frozenset({"asimd"})) == "neon"
    with pytest.raises(IsaError, match="lacks avx_vnni"):
        resolve_level("avx2+vnni", "x86_64", frozenset({"avx2", "fma", "f16c", "bmi2"}))


def test_avx2_with_avx_vnni():
    """An Intel AVX2 chip with AVX-VNNI (Alder Lake and later) gets avx2+vnni as its native
    level; a forced avx2 stays exactly x86-64-v3 (llama.cpp's GGML_AVX2 build)."""
    feats = frozenset({"avx2", "fma", "f16c", "bmi2", "avx_vnni"})
    assert resolve_level("native", "x86_64", feats) == "avx2+vnni"
    assert resolve_level("avx2", "x86_64", feats) == "avx2"
    assert resolve_level("native", "x86_64", feats | {"avx512f", "avx512bw", "avx512dq", "avx512vl"}) == "avx512"
    assert kernel_level("avx2+vnni") == "avx2"
    if "avx_vnni" in cpu_features()[1]:
        lib = load_kernels("avx2+vnni")
        if lib is not None:
            assert (lib.level, lib.isa) == ("avx2", "avx2+vnni")
            assert "ISA = avx2+vnni | AVX_VNNI = 1 | AVX2 = 1" in system_info(lib, 2)
            assert "AVX512_VNNI = 0" in system_info(lib, 2)


def test_stacked_matrix_is_the_parts(lib):
    """A stacked matrix (q, k, v in one) is its parts side by side: each output row the same
    integers and sums as the part's own product, bit for bit, and close to the exact product
    over 2000 activation rows.  The error is the int16 activations' rounding; the minimum's
    term takes the rounded values' sum (ggml's choice), so the errors cancel around the weights'
    centre: mean 2.1e-5 of the largest output, worst 5.4e-5.  With the exact sum(x) they were
    weighted by the nibbles 0..15, all of one sign: mean 3.3e-5, worst 9.7e-5.  (Where lp_row1_i8 reads
    one row of Q4_1 as Q8_0 -- by default at the AVX2 level without VNNI -- the reference is that
    rounding's exact product: the same bounds hold for the float order alone.)"""
    parts = [_matrix(T.Q4_1, (64, 64), seed=s) for s in range(3)]
    m = block_matrix([(raw, T.Q4_1, (64, 64)) for raw, _ in parts], lib)
    one = [block_matrix([(raw, T.Q4_1, (64, 64))], lib) for raw, _ in parts]
    assert m.n_out == 192
    g = torch.Generator().manual_seed(0)
    errs = []
    for _ in range(2000):
        x = torch.randn(1, 64, generator=g)
        xr = q8_0_rounded(x) if lib.fn.lp_row1_i8(int(T.Q4_1), 64) else x
        ref = torch.cat([xr.double() @ W.double().T for _, W in parts], dim=1).float()
        y = m(x)
        assert torch.equal(y, torch.cat([p(x) for p in one], dim=1))
        errs.append((y - ref).abs().max().item() / ref.abs().max().item())
    assert max(errs) <= 1e-4 and sum(errs) / len(errs) <= 2.5e-5


def test_rms_norm_and_glu(lib):
    x = torch.randn(5, 96)
    w = torch.randn(96)
    torch.testing.assert_close(kops.rms_norm(lib, x, w, 1e-5), F.rms_norm(x, (96,), w, 1e-5), rtol=1e-5, atol=1e-6)
    gu = torch.randn(3, 2 * 40)
    ref = F.silu(gu[:, :40]) * gu[:, 40:]
    torch.testing.assert_close(kops.glu(lib, gu[:, :40], gu[:, 40:]), ref, rtol=1e-5, atol=1e-6)
    ref = F.gelu(gu[:, :40], approximate="tanh") * gu[:, 40:]
    torch.testing.assert_close(kops.glu(lib, gu[:, :40], gu[:, 40:], gelu=True), ref, rtol=1e-5, atol=1e-6)


def test_argmax_is_the_greedy_pick(lib):
    """lp_argmax: the first largest (llama.cpp's greedy `logit > max`), a NaN never wins, -1
    when nothing is above -inf; lengths around its 16-lane passes and a vocabulary's."""
    g = torch.Generator().manual_seed(0)

    def am(x: torch.Tensor) -> int:
        return lib.fn.lp_argmax(x.data_ptr(), x.shape[0])

    for n in (1, 15, 16, 17, 33, 1000, 262144 + 3):
        x = torch.randn(n, generator=g)
        assert am(x) == int(x.argmax())
        top, tie = sorted(int(v) for v in torch.randint(0, n, (2,), generator=g))
        x[top] = x[tie] = 100.0  # two equal largest (one when the draws agree): the first wins
        assert am(x) == top
        if n > 2:
            x[(tie + 1) % n if (tie + 1) % n != top else (tie + 2) % n] = float("nan")
            assert am(x) == top
    assert am(torch.full((40,), float("-inf"))) == -1
    assert am(torch.full((40,), float("nan"))) == -1
    assert am(torch.empty(0)) == -1
    x = torch.full((40,), float("-inf"))
    x[37] = -1e30
    assert am(x) == 37
    assert kops.argmax(torch.tensor([0.0, 3.0, 1.0, 3.0])) == 1


def test_topk_is_the_k_largest(lib):
    """lp_topk: the k largest, largest first, of equal ones the earlier index first; NaN never
    taken while a number is left; -1 for k out of range; lengths around its vector passes."""
    g = torch.Generator().manual_seed(1)

    def tk(x: torch.Tensor, k: int) -> tuple[list[int], list[float], int]:
        ids, vals = torch.zeros(max(k, 1), dtype=torch.int64), torch.zeros(max(k, 1))
        rc = lib.fn.lp_topk(x.data_ptr(), x.shape[0], k, ids.data_ptr(), vals.data_ptr())
        return ids[:k].tolist(), vals[:k].tolist(), rc

    for n, k in ((1, 1), (17, 5), (100, 100), (1000, 40), (49152 + 7, 40), (262144, 1), (5000, 700)):
        x = torch.randn(n, generator=g)
        ids, vals, rc = tk(x, k)
        ref_v, ref_i = torch.topk(x, k)
        assert rc == k and ids == ref_i.tolist() and vals == ref_v.tolist()
    x = torch.tensor([1.0, 5.0, 3.0, 5.0, float("nan"), 5.0, 2.0] + [0.0] * 40)
    ids, vals, _ = tk(x, 4)
    assert ids == [1, 3, 5, 2] and vals == [5.0, 5.0, 5.0, 3.0]
    x = torch.full((30,), float("nan"))
    x[20], x[3] = 1.0, 2.0
    ids, vals, _ = tk(x, 3)
    assert ids[:2] == [3, 20] and vals[2] == float("-inf")
    assert tk(torch.zeros(10), 0)[2] == -1 and tk(torch.zeros(10), 11)[2] == -1


def test_row_ops_at_prefill_sizes():
    """The model's row-wise ops take the kernels at any row count (a prompt's 300 rows split
    among the threads): RMS norm over a 3-D [n, n_head, d] view (Gemma 3's per-head norms),
    the GLU of a gate and an up that are strided views or separate tensors, RoPE in place on
    a view of the stacked product, each against PyTorch's own ops."""
    from llamapy.model.layers import glu, glu_stacked, rms_norm
    from llamapy.model.rope import apply_rope_

    assert load_kernels() is not None
    qkv = torch.randn(300, 6 * 64)
    w = torch.randn(64)
    q = qkv[:, : 4 * 64].view(300, 4, 64)  # rows strided by the stacked product
    torch.testing.assert_close(rms_norm(q, w, 1e-6), F.rms_norm(q, (64,), w, 1e-6), rtol=1e-5, atol=1e-6)
    gate, up = torch.randn(300, 2 * 200)[:, 100:300], torch.randn(300, 200)
    torch.testing.assert_close(glu(gate, up, gelu=True), F.gelu(gate, approximate="tanh") * up, rtol=1e-5, atol=1e-6)
    gu = torch.randn(300, 2 * 200)
    torch.testing.assert_close(glu_stacked(gu), F.silu(gu[:, :200]) * gu[:, 200:], rtol=1e-5, atol=1e-6)
    p = RopeParams(64, 10000.0, 1.0, ROPE_TYPE_NEOX)
    cos, sin = rope_cos_sin(torch.arange(300), p)
    want = apply_rope(q.clone(), cos, sin, p)
    assert apply_rope_(q, cos, sin, p) is q
    torch.testing.assert_close(qkv[:, : 4 * 64].view(300, 4, 64), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rope_type", [ROPE_TYPE_NORM, ROPE_TYPE_NEOX])
def test_rope_in_place_matches_torch(lib, rope_type):
    n, n_head, d = 4, 5, 32
    p = RopeParams(d, 10000.0, 1.0, rope_type)
    qkv = torch.randn(n, n_head * d + 7)  # heads in a strided row, as in the stacked product
    x = qkv[:, : n_head * d].view(n, n_head, d)
    cos, sin = rope_cos_sin(torch.tensor([0, 3, 17, 400]), p)
    ref = apply_rope(x.clone(), cos, sin, p)
    tail = qkv[:, n_head * d :].clone()
    kops.rope_(lib, x, cos, sin, p.n_rot, rope_type == ROPE_TYPE_NEOX)
    torch.testing.assert_close(x, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(qkv[:, n_head * d :], tail)  # the rest of the row is not touched


@pytest.mark.parametrize("n_kv", [48, 700], ids=["short", "chunked"])
@pytest.mark.parametrize("n_head,n_head_kv,d,n", [(6, 2, 32, 5), (4, 4, 32, 5), (9, 3, 64, 5), (9, 3, 64, 1), (6, 1, 64, 5),
                                                 (4, 1, 256, 3), (4, 1, 256, 1), (9, 3, 64, 2)])
def test_attention_matches_sdpa(lib, n_head, n_head_kv, d, n, n_kv):
    """700 cells: few (row, KV head) groups split their cells into chunks among the threads,
    whose softmax partials are merged (attn.c lp_attn_chunks); a row seeing one cell leaves
    chunks empty."""
    g = torch.Generator().manual_seed(0)
    n_cells = n_kv + 16
    q = torch.randn(n, n_head, d, generator=g)
    k = torch.randn(n_cells, n_head_kv * d, generator=g).half()
    v = torch.randn(n_cells, n_head_kv * d, generator=g).half()
    visible = torch.rand(n, n_kv, generator=g) < 0.4
    visible[:, 0] = True
    if n > 2:
        visible[1] = False
        visible[1, n_kv // 2] = True  # one cell
    empty = n - 1 if n > 1 else None
    if empty is not None:
        visible[empty] = False  # a row that sees nothing gets zeros
    mask = torch.zeros(n, n_kv).masked_fill_(~visible, float("-inf"))
    out = kops.attn_f16(lib, q, k, v, n_kv, n_head_kv, mask, 0.125)
    _assert_is_sdpa(out, q, k.float(), v.float(), mask, n_head_kv, empty)


def _assert_is_sdpa(out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                    n_head_kv: int, empty: int | None) -> None:
    """out [n, n_head * d] is PyTorch's SDPA of q [n, n_head, d] over the first n_kv cells of k,
    v [n_cells, n_head_kv * d] (float) through mask [n, n_kv] at scale 1/8; row `empty` zeros."""
    n, n_head, d = q.shape
    n_kv = mask.shape[1]
    kh, vh = (w[:n_kv].view(n_kv, n_head_kv, d).transpose(0, 1)[None] for w in (k, v))
    ref = F.scaled_dot_product_attention(q.transpose(0, 1)[None], kh, vh, attn_mask=mask, scale=0.125,
                                         enable_gqa=n_head > n_head_kv)[0].transpose(0, 1).reshape(n, -1)
    keep = torch.arange(n) != (-1 if empty is None else empty)
    torch.testing.assert_close(out[keep], ref[keep], rtol=1e-4, atol=1e-5)
    if empty is not None:
        assert torch.equal(out[empty], torch.zeros(n_head * d))


KV_BLOCK_TYPES = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]


@pytest.mark.parametrize("name", KV_BLOCK_TYPES)
def test_kv_quantize_is_ggml_reference(lib, name):
    """The KV cache's C quantizers (kv_quant.c, the fused decode's store) write the bytes of
    ggml's quantize_row_*_ref, as the gguf package does: random rows, a zero row, a constant
    row, rows whose largest magnitude appears twice with both signs, tiny and huge values."""
    from llamapy.gguf.quants import quantize

    qt = T[name.upper()]
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, 128, generator=g) * torch.logspace(-3, 3, 40)[:, None]
    x[0] = 0.0
    x[1] = 0.7
    x[2, :32] = torch.linspace(-1, 1, 32)  # -1 first: q4_0 / q5_0 take the first of equal magnitudes
    x[3, 5], x[3, 9] = 3.0, -3.0
    got = kops.kv_quantize(lib, x, int(qt))
    assert torch.equal(got, quantize(x, qt))
    ref = gguf.quants.quantize(x.numpy(), qt)
    assert np.array_equal(got.numpy(), ref)


@pytest.mark.parametrize("types", [("q8_0", "q8_0"), ("q4_0", "q4_1"), ("q5_0", "q5_1"), ("f16", "q4_0"), ("q8_0", "f16")])
@pytest.mark.parametrize("n_head,n_head_kv,d,n,n_kv", [(9, 3, 64, 1, 300), (4, 1, 256, 3, 48), (6, 2, 32, 5, 700),
                                                     (4, 1, 256, 1, 2500), (9, 3, 64, 2, 1500)])
def test_attention_over_block_cache(lib, types, n_head, n_head_kv, d, n, n_kv):
    """Few rows over a KV cache in ggml's blocks (-ctk / -ctv): the same attention as PyTorch's
    SDPA over the cache dequantized, each row seeing its cells (one row sees nothing: zeros).
    Over ~1,250 visible cells a task widens them KV_WIDEN at a time and merges the parts."""
    from llamapy.gguf.quants import dequantize, quantize

    g = torch.Generator().manual_seed(1)
    n_cells = n_kv + 16
    q = torch.randn(n, n_head, d, generator=g)
    raw, wide = [], []
    for t in types:
        x = torch.randn(n_cells, n_head_kv * d, generator=g)
        if t == "f16":
            raw.append(x.half())
            wide.append(x.half().float())
        else:
            b = quantize(x, T[t.upper()])
            raw.append(b)
            wide.append(dequantize(b, T[t.upper()], (n_cells, n_head_kv * d)))
    visible = torch.rand(n, n_kv, generator=g) < 0.5
    visible[:, 0] = True
    empty = n - 1 if n > 2 else None
    if empty is not None:
        visible[empty] = False
    mask = torch.zeros(n, n_kv).masked_fill_(~visible, float("-inf"))
    c_types = c_kv_types(*types, d, d)
    out = kops.attn_kv(lib, q, raw[0], raw[1], c_types, n_kv, n_head_kv, d, mask, 0.125)
    _assert_is_sdpa(out, q, wide[0], wide[1], mask, n_head_kv, empty)
    assert c_kv_types("q8_0", "f16", 16, 16) is None and c_kv_types("iq4_nl", "f16", 64, 64) is None


def test_attention_refuses_what_it_does_not_read(lib):
    """The C attention answers -2 (a ValueError here) for a cache it does not read -- a type that
    is not f16 or blocks of 32 (iq4_nl), or block-typed heads that are not whole blocks --
    rather than reading past a row; c_kv_types keeps those caches off it."""
    q = torch.randn(1, 2, 16)
    k = torch.zeros(4, 32, dtype=torch.uint8)
    mask = torch.zeros(1, 4)
    for types, d in (((8, 8), 16), ((20, 1), 32), ((1, 8), 16)):  # q8_0 heads of 16; iq4_nl; f16 K, q8_0 V of 16
        with pytest.raises(ValueError, match="not read by the kernels"):
            kops.attn_kv(lib, q if d == 16 else torch.randn(1, 2, 32), k, k, types, 4, 1, d, mask, 0.25)


def test_block_cache_scratch_is_bounded(lib):
    """A thread's scratch for attention over a block-typed cache stops growing at KV_WIDEN
    visible cells (it held every visible cell: 1 GiB for Gemma 3's heads of 256 at 32,768 cells
    and 16 threads), and the memory estimate's mirror of it is the C size."""
    import ctypes

    from llamapy.kernels.types import KV_WIDEN, attn_kv_scratch_bytes

    f = ctypes.CDLL(str(lib.path)).lp_attn_kv_floats
    f.argtypes, f.restype = [ctypes.c_int64] * 3, ctypes.c_int64
    for d_k, d_v in [(64, 64), (256, 256), (128, 64)]:
        assert f(KV_WIDEN, d_k, d_v) == f(32768, d_k, d_v) > f(KV_WIDEN - 1, d_k, d_v)
        assert 4 * f(32768, d_k, d_v) == attn_kv_scratch_bytes(d_k, d_v)
    assert attn_kv_scratch_bytes(256, 256) < 1 << 20


@pytest.mark.parametrize("n_head,n_head_kv,d", [(9, 3, 64), (4, 1, 256), (6, 6, 12), (20, 1, 8), (5, 1, 32)])
@pytest.mark.parametrize("mask_kind", ["causal", "window", "two-seqs"])
def test_tile_attention_matches_reference(lib, n_head, n_head_kv, d, mask_kind):
    """Many rows (a prompt's ubatch) through the tiles of 16 query vectors (attn_tiles.c),
    against a float64 softmax: a causal prompt after 21 held cells, a sliding window, two
    sequences' prompts interleaved in the cells; cells past the ubatch's (n_kv padding) and a
    row that sees nothing (zeros); GQA groups of 1, 3, 4, 5 and 20 heads (more than a tile's
    16: two head chunks), head sizes of 8 to 256 (not multiples of 16).  A wrong lane, block
    edge, mask, running max or rescale fails it."""
    g = torch.Generator().manual_seed(1)
    n, held = 45, 21
    n_kv = held + n + 30  # cells past the last row's: never visible
    q = torch.randn(n, n_head, d, generator=g)
    k = torch.randn(n_kv, n_head_kv * d, generator=g).half()
    v = torch.randn(n_kv, n_head_kv * d, generator=g).half()
    pos = torch.arange(n_kv)
    qpos = held + torch.arange(n)
    visible = pos[None] <= qpos[:, None]
    if mask_kind == "window":
        visible &= qpos[:, None] - pos[None] < 19
    if mask_kind == "two-seqs":
        visible &= (pos[None] % 2) == (qpos[:, None] % 2)
    visible[7] = False
    mask = torch.zeros(n, n_kv).masked_fill_(~visible, float("-inf"))
    out = kops.attn_tiles_f16(lib, q, k, v, n_kv, n_head_kv, mask, 0.3)
    r = n_head // n_head_kv
    kk = k.double().view(n_kv, n_head_kv, d).repeat_interleave(r, 1)
    vv = v.double().view(n_kv, n_head_kv, d).repeat_interleave(r, 1)
    s = torch.einsum("thd,khd->htk", q.double(), kk) * 0.3 + mask.double()[None]
    ref = torch.einsum("htk,khd->thd", s.softmax(-1), vv).reshape(n, -1)
    ref[7] = 0.0
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=2e-5)
    assert kops.attn_tiles_f16(lib, q[:, :, :6].contiguous(), k[:, : 6 * n_head_kv].contiguous(),
                               v[:, : 6 * n_head_kv].contiguous(), n_kv, n_head_kv, mask, 0.3) is None  # d % 4: declined


@pytest.mark.parametrize("mask_kind", ["causal", "window"])
def test_tile_attention_bits_do_not_depend_on_the_tasks(lib, mask_kind):
    """A task of attn_tiles.c widens each block of cells once for up to AT_G tiles of rows (4
    below AVX-512; fewer where the threads would get under 4 tasks each), and its blocks start
    at multiples of AT_C whatever the task's first visible cell: at 1, 5 and 19 threads (4, 3
    and 1 tiles a task for these 300 rows) the same bits, within 2e-5 of a float64 softmax --
    under a causal mask after 13 held cells and a sliding window of 37 (tiles' first cells off
    the blocks' edges), with a row that sees nothing."""
    g = torch.Generator().manual_seed(3)
    n, held, n_head, d = 300, 13, 4, 256
    n_kv = held + n + 5
    q = torch.randn(n, n_head, d, generator=g)
    k, v = (torch.randn(n_kv, d, generator=g).half() for _ in range(2))
    pos, qpos = torch.arange(n_kv), held + torch.arange(n)
    visible = pos[None] <= qpos[:, None]
    if mask_kind == "window":
        visible &= qpos[:, None] - pos[None] < 37
    visible[100] = False
    mask = torch.zeros(n, n_kv).masked_fill_(~visible, float("-inf"))
    threads = torch.get_num_threads()
    try:
        outs = []
        for t in (1, 5, 19):
            torch.set_num_threads(t)
            outs.append(kops.attn_tiles_f16(lib, q, k, v, n_kv, 1, mask, 0.1))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    s = torch.einsum("thd,kd->htk", q.double(), k.double()) * 0.1 + mask.double()[None]
    ref = torch.einsum("htk,kd->thd", s.softmax(-1), v.double()).reshape(n, -1)
    ref[100] = 0.0
    torch.testing.assert_close(outs[0].double(), ref, rtol=0, atol=2e-5)


def _decode_steps(model, n_seq: int) -> torch.Tensor:
    """A 40-token prompt per sequence, then 4 steps of one token each; the last logits."""
    from llamapy import Batch, Context, ContextParams

    ctx = Context(model, ContextParams(n_ctx=512, n_seq_max=n_seq, kv_unified=True))
    b = Batch()
    for s in range(n_seq):
        for i in range(40):
            b.add((3 + 7 * i + 11 * s) % model.n_vocab, i, [s], logits=i == 39)
    ctx.decode(b)
    for p in range(40, 44):
        b = Batch()
        for s in range(n_seq):
            b.add((5 * p + s) % model.n_vocab, p, [s], logits=True)
        ctx.decode(b)
    return ctx.get_logits().clone()


@pytest.mark.parametrize("n_seq", [1, 3])
def test_decode_with_and_without_kernels(tmp_path, monkeypatch, n_seq):
    """The whole decode path (block matmuls, fused norm/rope/swiglu/attention) against the
    PyTorch path of the same Q4_1 file (LLAMAPY_KERNELS=0): the same logits up to the
    rounding of each path (bf16 activations in PyTorch's int4 kernel)."""
    from llamapy import Model
    from tiny_model import write_tiny_llama

    if load_kernels() is None:
        pytest.skip("no C compiler: the CPU kernels are off")
    path = write_tiny_llama(tmp_path / "q4_1.gguf", weight_type=T.Q4_1)
    fast = Model.load(path)
    assert type(fast.net.layers[0].wqkv).__name__ == "BlockMatrix"
    assert fast.n_bytes_resident < Model.load(path, exact=True).n_bytes_resident / 4
    y_fast = _decode_steps(fast, n_seq)
    monkeypatch.setenv("LLAMAPY_KERNELS", "0")
    load_kernels.cache_clear()
    try:
        slow = Model.load(path)
        assert type(slow.net.layers[0].wqkv).__name__ == "QMatrix"
        y_slow = _decode_steps(slow, n_seq)
    finally:
        monkeypatch.delenv("LLAMAPY_KERNELS")
        load_kernels.cache_clear()
    # one sequence on x86: each step's one-row Q4_1 products read x as ggml's Q8_0 (lp_row1_i8, as
    # llama.cpp's Q8_1): 3.2% of the largest logit from the exact model's here (int16: 0.04%)
    # and at AVX2 without VNNI the prompts' 40 and 120 rows read x as ggml's Q8_0 in the int8 lanes
    # (lanes8_x86.c, lp_lanes8_takes): 4.0% here
    fn = load_kernels().fn
    tol = 6e-2 if (n_seq == 1 and fn.lp_row1_i8(int(T.Q4_1), 64)) or fn.lp_lanes8_takes(int(T.Q4_1), 64, 40) else 3e-2
    assert (y_fast - y_slow).abs().max().item() <= tol * y_slow.abs().max().item()
    assert torch.equal(y_fast.argmax(1), y_slow.argmax(1))
