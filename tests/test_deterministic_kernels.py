"""Deterministic mode's products (kernels/c/rows_det_x86.c, lp_mm_det) of many rows against each row alone
(lp_mm_det of one row: det1_x86.c, the kernel of a deterministic decode), bit for bit: every type of the two
test models (SmolLM2 Q4_1: Q4_1, Q8_0; Gemma 3 Q4_K_M: Q8_0, Q5_0, Q4_K, Q6_K) and the other types the file
covers, random weights and activations, 1..70 and 530 rows (the twin lanes, the lane tiles, det8's int8 lanes,
their slices), at the x86 levels this CPU runs (at AVX2 every covered type takes det8's int8 form:
det8_avx2_x86.c).  The lanes (lanes_x86.c) and det1_x86.c write the same order each its own way, so a change
to either fails here; and both stay within rounding of the default product (lp_mm)."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from llamapy.kernels import load_kernels
from llamapy.kernels.build import IsaError, cpu_features, resolve_level

T = gguf.GGMLQuantizationType
COVERED = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K]
F16_FIELDS = {T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}
N_OUT = 37  # chunks of 16, 16, 5: the one-row path's weight-row pairs and an odd last row
MAX_ROWS = 70


def x86_levels() -> list:
    machine, feats = cpu_features()
    if machine not in ("x86_64", "AMD64"):
        return [pytest.param("none", marks=pytest.mark.skip(reason=f"rows_det_x86.c is x86 only; this is {machine}"))]
    out = []
    for lv in ("avx512", "avx2+vnni", "avx2"):
        try:
            resolve_level(lv, machine, feats)
            out.append(lv)
        except IsaError as e:
            out.append(pytest.param(lv, marks=pytest.mark.skip(reason=f"not runnable here: {e}")))
    return out


@pytest.fixture(scope="module", params=x86_levels())
def lib(request):
    k = load_kernels(request.param)
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off")
    return k


def weights(qtype: T, n_out: int, n_in: int, seed: int) -> np.ndarray:
    """Random blocks of qtype, uint8 [n_out, row bytes]."""
    rng = np.random.default_rng(seed)
    if qtype in F16_FIELDS:
        be, bb = gguf.GGML_QUANT_SIZES[qtype]
        b = rng.integers(0, 256, size=(n_out * n_in // be, bb), dtype=np.uint8)
        for off in F16_FIELDS[qtype]:
            h = rng.uniform(0.002, 0.03, size=len(b)).astype(np.float16)
            b[:, off : off + 2] = h.view(np.uint8).reshape(len(b), 2)
        return np.ascontiguousarray(b.reshape(n_out, -1))
    w = rng.standard_normal((n_out, n_in)).astype(np.float32)
    return np.ascontiguousarray(gguf.quants.quantize(w, qtype))


def activations(n: int, n_in: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n_in)).astype(np.float32)
    x[:, rng.integers(0, n_in, size=4)] *= 40.0  # outliers, as real activations have
    return x


READS_AMX = 4  # mm.h LP_READS_AMX: lp_det_reads's answer for Q4_K / Q5_K where AMX is on
READS_I8 = 8  # mm.h LP_READS_I8: lp_det_reads's answer for a type det8_x86.c takes (the 32-element types at AVX-512)
READS_L8 = {T.Q4_0: 64, T.Q4_1: 64, T.Q5_0: 128, T.Q5_1: 128}  # rows_det_x86.h LP_READS_L8_4 / _5: at AVX2 without
# VNNI these types' answer (the default's int8 lanes at some row counts, det8's x8 at the others)
READS_KZ = 33  # mm.h LP_READS_Q8K | LP_READS_INTS: Q4_K / Q6_K at AVX-512 VNNI without AMX (det_kz_x86.c: a row without
# an outlier block in ggml's Q8_K, q8kz's order; a row with one in the int16 lanes')


def dequantized(qtype, w: np.ndarray, n_out: int, n_in: int) -> np.ndarray:
    return gguf.quants.dequantize(w, qtype).reshape(n_out, n_in).astype(np.float64)


def rms_rel(got: np.ndarray, exact: np.ndarray) -> float:
    """The rms error relative to the rms of the exact product."""
    return float(np.sqrt(((got - exact) ** 2).mean() / (exact**2).mean()))


def one_row(lib, qtype, w, x, n_out, accumulate=False, y0=None, fn="lp_mm_det"):
    """fn (lp_mm_det, or the default lp_mm) of each row alone: [n, n_out]."""
    y = np.zeros((len(x), n_out), np.float32) if y0 is None else y0.copy()
    for r in range(len(x)):
        xr = np.ascontiguousarray(x[r : r + 1])
        yr = np.ascontiguousarray(y[r : r + 1])
        assert getattr(lib.fn, fn)(int(qtype), w.ctypes.data, n_out, x.shape[1], xr.ctypes.data, 1, yr.ctypes.data,
                                   n_out, int(accumulate)) == 0
        y[r] = yr[0]
    return y


def det(lib, qtype, w, x, n_out, accumulate=False, y0=None):
    y = np.zeros((len(x), n_out), np.float32) if y0 is None else y0.copy()
    assert lib.fn.lp_mm_det(int(qtype), w.ctypes.data, n_out, x.shape[1], x.ctypes.data, len(x), y.ctypes.data, n_out,
                            int(accumulate)) == 0
    return y


def rows_as_alone(lib, qtype, w, x, n_out, counts, y0, extra=None) -> None:
    """lp_mm_det of the first n rows of x, for each n in counts, bit for bit each row's one-row product, y = and
    y += (y0's rows); extra(n, xn, got): a further check of those n rows."""
    ref = one_row(lib, qtype, w, x, n_out)
    ref_acc = one_row(lib, qtype, w, x, n_out, accumulate=True, y0=y0)
    for n in counts:
        xn = np.ascontiguousarray(x[:n])
        got = det(lib, qtype, w, xn, n_out)
        bad = np.nonzero((got.view(np.uint32) != ref[:n].view(np.uint32)).any(axis=1))[0]
        assert len(bad) == 0, f"{qtype.name}: {n} rows, rows {bad[:8].tolist()} differ from the one-row product"
        acc = det(lib, qtype, w, xn, n_out, accumulate=True, y0=np.ascontiguousarray(y0[:n]))
        assert np.array_equal(acc.view(np.uint32), ref_acc[:n].view(np.uint32)), f"{qtype.name}: {n} rows, y +="
        if extra is not None:
            extra(n, xn, got)


@pytest.mark.parametrize("qtype", COVERED, ids=lambda t: t.name)
def test_det_rows_equal_one_row(lib, qtype):
    n_in = 512
    assert lib.fn.lp_mm_det_covers(int(qtype), n_in) == 1
    w = weights(qtype, N_OUT, n_in, seed=int(qtype))
    x = activations(MAX_ROWS, n_in, seed=7)
    ref = one_row(lib, qtype, w, x, N_OUT)
    default = one_row(lib, qtype, w, x, N_OUT, fn="lp_mm")  # the same integers, the float sums in another order
    if lib.fn.lp_row1_i8(int(qtype), n_in):  # the default's one row reads Q8_0 through det8 too (row1_x86.h)
        assert np.array_equal(default.view(np.uint32), ref.view(np.uint32))
    elif lib.fn.lp_det_reads(int(qtype)) == READS_I8:  # det8_x86.c: int8 activations (ggml's Q8_1), not the int16
        exact = x.astype(np.float64) @ dequantized(qtype, w, N_OUT, n_in).T
        assert rms_rel(ref, exact) < 2e-2 and rms_rel(default, exact) < 1e-4, (rms_rel(ref, exact), rms_rel(default, exact))
    else:  # (det_kz_x86.c's rows too: these all have an outlier block, the int16 lanes' order)
        np.testing.assert_allclose(ref, default, rtol=1e-4, atol=1e-4 * float(np.abs(default).max()))
    for n in range(1, MAX_ROWS + 1):
        got = det(lib, qtype, w, np.ascontiguousarray(x[:n]), N_OUT)
        bad = np.nonzero((got.view(np.uint32) != ref[:n].view(np.uint32)).any(axis=1))[0]
        assert len(bad) == 0, f"{qtype.name}: {n} rows, rows {bad[:8].tolist()} differ from the one-row product"
    # rows in another position of the batch (a row's result is its own): the last rows first
    perm = np.ascontiguousarray(x[::-1][:23])
    assert np.array_equal(det(lib, qtype, w, perm, N_OUT).view(np.uint32), ref[::-1][:23].view(np.uint32))


@pytest.mark.parametrize("qtype", [T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_det_accumulate_and_model_shapes(lib, qtype):
    """y += x W^T as at one row, on a shape of the test models (576 / 640 wide, 1536 / 2048 out: many chunks)."""
    n_in, n_out = (576, 1536) if qtype in (T.Q4_1, T.Q8_0) else (768, 2048)
    if qtype in F16_FIELDS and n_in % 256:
        n_in = 768
    w = weights(qtype, n_out, n_in, seed=3)
    x = activations(19, n_in, seed=11)
    y0 = np.random.default_rng(5).standard_normal((19, n_out)).astype(np.float32)
    ref = one_row(lib, qtype, w, x, n_out, accumulate=True, y0=y0)
    assert np.array_equal(det(lib, qtype, w, x, n_out, accumulate=True, y0=y0).view(np.uint32), ref.view(np.uint32))


def test_det8_takes_the_32_element_types(lib):
    """At the AVX-512 level (with VNNI, as this CPU's build has) every 32-element type reads det8_x86.c's int8
    form (Q8_0 needs VNNI there: its bytes q + 128 would saturate vpmaddubsw); at AVX2 too, with or without
    AVX-VNNI (det8_avx2_x86.c: Q8_0 signed, ggml's |w| x sign(x, w), where VNNI is missing)."""
    want = READS_I8 if lib.level == "avx2" or "vnni" in lib.isa else 1
    for t in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):  # (AVX2 without VNNI: the 4- and 5-bit ones lanes8's lanes too)
        l8 = lib.level == "avx2" and "vnni" not in lib.isa and t != T.Q8_0
        assert lib.fn.lp_det_reads(int(t)) == (READS_L8[t] if l8 else want), t.name
    amx = lib.fn.lp_amx_on() == 1  # Q4_K / Q5_K: the int16 rows, split for AMX's tiles from 128 rows; at AVX2 int8
    k45 = READS_I8 if lib.level == "avx2" else READS_AMX if amx else 1
    kz = lib.level != "avx2" and "vnni" in lib.isa and not lib.amx  # Q4_K / Q6_K: det_kz_x86.c there
    assert lib.fn.lp_det_reads(int(T.Q4_K)) == (READS_KZ if kz else k45) and lib.fn.lp_det_reads(int(T.Q5_K)) == k45
    assert lib.fn.lp_det_reads(int(T.Q6_K)) == (READS_I8 if lib.level == "avx2" else READS_KZ if kz else 1)


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_det_kz_rows_by_their_own_values(lib, qtype):
    """Where --deterministic's Q4_K / Q6_K read both forms (det_kz_x86.c), a row without an outlier block takes
    q8kz's order -- 16-127 such rows give the default's bits (mm_q8kz.inc), and Q8_K's accuracy -- and a row with
    one the int16 lanes'; in a batch mixing both, of 1..40, 255-258 and 530 rows (DET_SLICE 256: a slice with
    no outlier row), each row equals itself alone, y = and y +=; 37 outputs (a partial pass of 5)."""
    if lib.fn.lp_det_reads(int(qtype)) != READS_KZ:
        pytest.skip("--deterministic's K-quants take another order at this level (the int16 lanes, AMX, or int8 at AVX2)")
    n_in = 768
    w = weights(qtype, N_OUT, n_in, seed=29)
    rng = np.random.default_rng(31)
    x = rng.standard_normal((530, n_in)).astype(np.float32)
    exact = x.astype(np.float64) @ dequantized(qtype, w, N_OUT, n_in).T
    for n in (16, 40):  # no outliers: q8kz's rows, the default's bits
        xs = np.ascontiguousarray(x[:n])
        y = np.zeros((n, N_OUT), np.float32)
        assert lib.fn.lp_mm(int(qtype), w.ctypes.data, N_OUT, n_in, xs.ctypes.data, n, y.ctypes.data, N_OUT, 0) == 0
        assert np.array_equal(det(lib, qtype, w, xs, N_OUT).view(np.uint32), y.view(np.uint32)), f"{n} rows"
        assert rms_rel(y, exact[:n]) < 2e-2, rms_rel(y, exact[:n])  # Q8_K: measured 7e-3
    odd = np.r_[rng.choice(256, 40, replace=False), 300 + rng.choice(230, 30, replace=False)]
    x[odd, rng.integers(0, n_in)] *= 60.0  # an outlier block in these rows only (none in rows 256-299)
    blocks = x.reshape(530, -1, 256).astype(np.float64)  # row1q8k_x86.c's rule, LP_Q8K_RATIO 8: a block is an outlier one
    off = ((np.abs(blocks).max(-1) ** 2 * 256 > 64 * (blocks**2).sum(-1)).any(-1))  # where max^2 256 > 8^2 sum(x^2)
    assert 0 < off[:256].sum() < 256 and not off[256:300].any() and 0 < off[300:].sum() < 230  # both kinds of row
    y0 = rng.standard_normal((530, N_OUT)).astype(np.float32)
    ref, ref_acc = one_row(lib, qtype, w, x, N_OUT), one_row(lib, qtype, w, x, N_OUT, accumulate=True, y0=y0)
    for n in (*range(1, 41), 255, 256, 257, 258, 530):
        xs = np.ascontiguousarray(x[:n])
        got = det(lib, qtype, w, xs, N_OUT)
        bad = np.nonzero((got.view(np.uint32) != ref[:n].view(np.uint32)).any(axis=1))[0]
        assert len(bad) == 0, f"{qtype.name}: {n} rows, rows {bad[:8].tolist()} differ from the one-row product"
    got = det(lib, qtype, w, x, N_OUT, accumulate=True, y0=y0)
    assert np.array_equal(got.view(np.uint32), ref_acc.view(np.uint32)), "y += x W^T"
    tail = np.ascontiguousarray(x[256:300])  # rows 256-299 alone: no outlier row, all q8kz
    assert np.array_equal(det(lib, qtype, w, tail, N_OUT).view(np.uint32), ref[256:300].view(np.uint32))


AMX_TYPES = [T.Q4_K, T.Q5_K, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


@pytest.mark.parametrize("qtype", AMX_TYPES, ids=lambda t: t.name)
def test_det_amx_rows_equal_one_row(lib, qtype):
    """From 128 rows (LP_DENSE_ROWS) Q4_K / Q5_K take AMX's tiles where the CPU has them (amx_x86.c: the lanes'
    bits), and so do det8's 32-element types (det8_amx_x86.c: det8's bits): 128, 143 (a part-filled tile) and 530
    rows, with AMX on and off, row for row equal to each row alone; 143 rows also as y += x W^T.  det8's types at
    17 blocks a row (an odd count: the last block in the second C tile) and 37 outputs (a last tile of 5)."""
    if lib.fn.lp_amx_on() != 1:
        pytest.skip("no AMX tiles at this level / on this CPU")
    n_in = 512 if qtype in F16_FIELDS else 544
    w = weights(qtype, N_OUT, n_in, seed=17)
    x = activations(530, n_in, seed=19)
    y0 = np.random.default_rng(23).standard_normal((143, N_OUT)).astype(np.float32)
    ref = one_row(lib, qtype, w, x, N_OUT)
    ref_acc = one_row(lib, qtype, w, x[:143], N_OUT, accumulate=True, y0=y0)
    try:
        for on in (1, 0):
            assert lib.fn.lp_amx_set(on) == on
            for n in (128, 143, 530):
                got = det(lib, qtype, w, np.ascontiguousarray(x[:n]), N_OUT)
                bad = np.nonzero((got.view(np.uint32) != ref[:n].view(np.uint32)).any(axis=1))[0]
                assert len(bad) == 0, f"{qtype.name}: AMX {on}, {n} rows, rows {bad[:8].tolist()} differ from one row"
            got = det(lib, qtype, w, np.ascontiguousarray(x[:143]), N_OUT, accumulate=True, y0=y0)
            assert np.array_equal(got.view(np.uint32), ref_acc.view(np.uint32)), f"{qtype.name}: AMX {on}, y += x W^T"
    finally:
        lib.fn.lp_amx_set(1)


def aligned_rows(n: int, n_out: int, shift: int) -> np.ndarray:
    """A float32 [n, n_out] view whose first element sits `shift` floats past a 64-byte boundary."""
    buf = np.zeros(n * n_out + 32, np.float32)
    start = (-buf.ctypes.data % 64) // 4 + shift
    return buf[start : start + n * n_out].reshape(n, n_out)


def check_rows_alone(lib, qtype, w, x, y0, row_counts) -> None:
    """lp_mm_det of the first n rows of x (n in row_counts) into y aligned to 64 bytes and 4 floats off, with and
    without y += (from y0), row for row bit-equal to each row alone."""
    n_out, n_in = y0.shape[1], x.shape[1]
    ref = one_row(lib, qtype, w, x, n_out)
    ref_acc = one_row(lib, qtype, w, x, n_out, accumulate=True, y0=y0)
    for n in row_counts:
        xn = np.ascontiguousarray(x[:n])
        for shift in (0, 4):
            for acc, want in ((0, ref), (1, ref_acc)):
                y = aligned_rows(n, n_out, shift)
                y[:] = y0[:n] if acc else 7.0
                assert lib.fn.lp_mm_det(int(qtype), w.ctypes.data, n_out, n_in, xn.ctypes.data, n, y.ctypes.data, n_out,
                                        acc) == 0
                bad = np.nonzero((y.view(np.uint32) != want[:n].view(np.uint32)).any(axis=1))[0]
                assert len(bad) == 0, f"{qtype.name}: {n} rows, shift {shift}, y += {acc}: rows {bad[:8].tolist()} differ"


@pytest.mark.parametrize("qtype", [T.Q4_1, T.Q8_0], ids=lambda t: t.name)
def test_det_amx_whole_lines(lib, qtype):
    """det8_amx_x86.c writes a chunk's 16 outputs around the cache where they are whole aligned 64-byte lines (y
    64-byte aligned, ldy a multiple of 16) and nothing is added to y: 48 outputs, 143 and 530 rows into an aligned
    y and one 4 floats off (the ordinary stores), with and without y +=, row for row equal to each row alone."""
    if lib.fn.lp_amx_on() != 1:
        pytest.skip("no AMX tiles at this level / on this CPU")
    n_in, n_out = 544, 48
    w = weights(qtype, n_out, n_in, seed=29)
    x = activations(530, n_in, seed=31)
    y0 = np.random.default_rng(37).standard_normal((530, n_out)).astype(np.float32)
    check_rows_alone(lib, qtype, w, x, y0, (143, 530))


@pytest.mark.parametrize("qtype", [T.Q2_K, T.Q3_K, T.IQ4_NL, T.F16, T.F32], ids=lambda t: t.name)
def test_uncovered_types_refused_untouched(lib, qtype):
    """A type without a deterministic multi-row path: covers() says 0, lp_mm_det returns -2 and writes nothing
    (the engine then keeps one-row ubatches for that model)."""
    assert lib.fn.lp_mm_det_covers(int(qtype), 512) == 0
    y = np.full((3, 4), 7.0, np.float32)
    x = np.ones((3, 512), np.float32)
    w = np.zeros(4 * 4096, np.uint8)
    assert lib.fn.lp_mm_det(int(qtype), w.ctypes.data, 4, 512, x.ctypes.data, 3, y.ctypes.data, 4, 0) == -2
    assert (y == 7.0).all()
    assert lib.fn.lp_mm_det_covers(int(T.Q4_K), 512 + 32) == 0  # a K-quant row not a whole number of super-blocks


@pytest.mark.parametrize("qtype", COVERED, ids=lambda t: t.name)
def test_det_slices_equal_one_row(lib, qtype):
    """A prompt-sized product (530 rows: the lanes' slices of 256 and det8's of 512 rows, a last group of 2) row
    for row equal to each row alone, and as y += x W^T (every covered type: at AVX2 all of them take det8's int8
    form, det8_avx2_x86.c)."""
    n_in = 512
    w = weights(qtype, 21, n_in, seed=9)
    x = activations(530, n_in, seed=13)
    ref = one_row(lib, qtype, w, x, 21)
    assert np.array_equal(det(lib, qtype, w, x, 21).view(np.uint32), ref.view(np.uint32))
    y0 = np.random.default_rng(29).standard_normal((530, 21)).astype(np.float32)
    ref_acc = one_row(lib, qtype, w, x, 21, accumulate=True, y0=y0)
    assert np.array_equal(det(lib, qtype, w, x, 21, accumulate=True, y0=y0).view(np.uint32), ref_acc.view(np.uint32))


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q5_K, T.Q6_K], ids=lambda t: t.name)
def test_det_lane_passes_equal_one_row(lib, qtype):
    """The lane tiles' passes over the groups of 16 rows (mm_lanes.h lanes_pass_groups: at AVX-512 three groups a
    pass for the types of one scale per 32, two from four groups left, else two) at 47-49, 95-97, 143 and 161 rows
    (3, 4, 6, 7, 9, 11 groups), y aligned and 4 floats off, with and without y +=, row for row equal to each row
    alone (every row with an outlier block: the int16 lanes' order)."""
    n_in, n_out = 256, 21
    w = weights(qtype, n_out, n_in, seed=53)
    x = activations(161, n_in, seed=59)
    y0 = np.random.default_rng(61).standard_normal((161, n_out)).astype(np.float32)
    check_rows_alone(lib, qtype, w, x, y0, (47, 48, 49, 95, 96, 97, 143, 161))


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_det_lanes_past_l2_equal_one_row(lib, qtype):
    """A slice whose lanes outgrow mm_lanes.h LANES_L2_BYTES (256 rows of 1280: 640 KiB) takes LANES_NW weight rows a
    pass (lanes_chunk), a last chunk of 5 and a last slice of 44 rows; y aligned and 4 floats off, with and without
    y +=, row for row equal to each row alone."""
    n_in, n_out = 1280, 37
    w = weights(qtype, n_out, n_in, seed=67)
    x = activations(300, n_in, seed=71)
    y0 = np.random.default_rng(73).standard_normal((300, n_out)).astype(np.float32)
    check_rows_alone(lib, qtype, w, x, y0, (300,))


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q5_0, T.Q6_K], ids=lambda t: t.name)
def test_det_long_rows_whole_lines(lib, qtype):
    """A vocabulary-wide product (det8_avx2_x86.c gathers a chunk's 16 outputs in a buffer of rows and writes each
    y row's strip once): 65576 outputs (a last chunk of 8), 16 and 3 rows, y aligned and 4 floats off, with and
    without y +=, row for row equal to each row alone."""
    n_in, n_out = (256 if qtype in F16_FIELDS else 64), 65576
    w = weights(qtype, n_out, n_in, seed=41)
    x = activations(16, n_in, seed=43)
    y0 = np.random.default_rng(47).standard_normal((16, n_out)).astype(np.float32)
    check_rows_alone(lib, qtype, w, x, y0, (16, 3))


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1], ids=lambda t: t.name)
def test_det_lanes8_rows_equal_one_row(lib, qtype):
    """5..41 rows of the 4- and 5-bit 32-element types (at AVX2 without VNNI the default's int8 lanes from 5 rows,
    lanes8_x86.c, up to det_lanes8_rows: 23 / 40; det8's tile past them) against each row alone, on SmolLM2's
    gate shape (1536 outputs: LANES_WIDE tasks at one thread), y += as well; and at that level the default
    product (lp_mm) of those rows the same bits (its lanes8 order is det8's)."""
    n_in, n_out = 576, 1536
    w = weights(qtype, n_out, n_in, seed=int(qtype) + 40)
    x = activations(41, n_in, seed=13)
    y0 = np.random.default_rng(9).standard_normal((41, n_out)).astype(np.float32)

    def default_equal(n, xn, got):  # at plain AVX2 the default's lanes8 order is det8's
        y = np.zeros((n, n_out), np.float32)
        assert lib.fn.lp_mm(int(qtype), w.ctypes.data, n_out, n_in, xn.ctypes.data, n, y.ctypes.data, n_out, 0) == 0
        assert np.array_equal(y.view(np.uint32), got.view(np.uint32)), f"{qtype.name}: {n} rows, lp_mm"

    lanes8 = lib.level == "avx2" and "vnni" not in lib.isa
    rows_as_alone(lib, qtype, w, x, n_out, list(range(5, 33)) + [40, 41], y0, default_equal if lanes8 else None)
