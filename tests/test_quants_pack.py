"""quantize() (KV-cache types) against gguf.quants.quantize, a scalar transcription of ggml's
IQ4_NL reference, ggml's own C IQ4_XS reference (where llama.cpp is built), hand-computed bytes,
and round-trip error bounds."""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

from llamapy.gguf.quants import QUANTIZE_TYPES, dequantize, quantize, row_size
from llamapy.gguf.quants_pack import KVALUES_IQ4NL

GGUF_HAS_QUANTIZE = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.MXFP4]


def edge_rows() -> np.ndarray:
    """[12, 64] float32 rows that stress the reference's corner cases, two 32-blocks each."""
    ties = np.array([127, 62.5, -62.5, 0.5, -0.5, 1.5, -1.5, 2.5] * 4, dtype=np.float32)  # q8_0: d = 1
    spike = np.zeros(32, np.float32)
    spike[5] = -3.0
    rows = [
        np.zeros(64), np.full(64, 3.0), np.full(64, -3.0), np.tile(ties, 2),
        np.tile(spike, 2), np.tile(-spike, 2), np.linspace(-1, 1, 64),
        np.full(64, 1e-30), np.linspace(-1e6, 2e5, 64),  # d underflows / overflows fp16
        np.r_[np.full(32, 7.0), np.full(32, -7.0)], np.arange(64) * 0.25, np.arange(64)[::-1] - 40.0,
    ]
    return np.stack(rows).astype(np.float32)


def sample_rows(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 4, 256)).astype(np.float32)
    x *= np.array([1e-3, 1.0, 30.0], dtype=np.float32)[:, None, None]
    x[:, 3] = rng.standard_cauchy((3, 256))  # heavy tails: one outlier dominates a block
    return x


def ref_bytes(x: np.ndarray, qtype: T) -> np.ndarray:
    with np.errstate(over="ignore"):  # edge_rows() overflows fp16 on purpose
        ref = gq.quantize(x, qtype)
    return np.ascontiguousarray(ref).view(np.uint8).reshape(*x.shape[:-1], -1)


@pytest.mark.parametrize("qtype", GGUF_HAS_QUANTIZE, ids=lambda t: t.name)
def test_quantize_equals_gguf_reference(qtype):
    for x in (sample_rows(int(qtype)), edge_rows()):
        got = quantize(torch.from_numpy(x), qtype)
        assert got.dtype == torch.uint8
        assert tuple(got.shape) == (*x.shape[:-1], row_size(qtype, x.shape[-1]))
        ref = ref_bytes(x, qtype)
        bad = np.argwhere(got.numpy() != ref)
        assert bad.size == 0, f"{qtype.name}: {len(bad)} bytes differ, first at {bad[0].tolist()}"


def test_bf16_rounding_and_nan_like_ggml():
    bits = np.random.default_rng(3).integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32)
    bits[:4] = [0x7F800001, 0xFFC00001, 0x3F808000, 0x3F818000]  # sNaN, -qNaN, ties to even (down, up)
    x = bits.view(np.float32)
    assert np.array_equal(quantize(torch.from_numpy(x.copy()), T.BF16).numpy(), ref_bytes(x, T.BF16))


def test_q8_0_rounds_half_away_from_zero_by_hand():
    """Independent of gguf: d = 127/127 = 1, so q = roundf(x); 62.5 -> 63, -0.5 -> -1 (not to even)."""
    x = torch.tensor([127, 62.5, -62.5, 0.5, -0.5, 1.5, -1.5, 2.5] * 4)
    out = quantize(x, T.Q8_0).numpy()
    assert out[:2].view("<f2")[0] == 1.0
    assert out[2:10].view(np.int8).tolist() == [127, 63, -63, 1, -1, 2, -2, 3]


def iq4_nl_block_ref(x: np.ndarray) -> bytes:
    """Scalar transcription of ggml's quantize_row_iq4_nl_impl(32, 32, ..., qw=NULL, ntry=7) in float32."""
    f = np.float32
    vals = [f(v) for v in KVALUES_IQ4NL]

    def best_index(v: np.float32) -> int:  # best_index_int8
        if v <= vals[0]:
            return 0
        if v >= vals[15]:
            return 15
        ml, mu = 0, 15
        while mu - ml > 1:
            mav = (ml + mu) // 2
            if v < vals[mav]:
                mu = mav
            else:
                ml = mav
        return mu - 1 if v - vals[mu - 1] < vals[mu] - v else mu

    def sums(id_: np.float32) -> tuple[np.float32, np.float32]:
        sumqx = sumq2 = f(0)
        for xj in x:
            q, w = vals[best_index(id_ * xj)], xj * xj
            sumqx += w * q * xj
            sumq2 += w * q * q
        return sumqx, sumq2

    amax = mx = f(0)
    for xj in x:
        if abs(xj) > amax:
            amax, mx = abs(xj), xj
    scale = f(0)
    if amax >= f(1e-15):
        sumqx, sumq2 = sums(f(1) / (-mx / vals[0]))
        d = sumqx / sumq2
        best = d * sumqx
        for itry in range(-7, 8):
            sumqx, sumq2 = sums(f(itry - 127) / mx)
            if sumq2 > 0 and sumqx * sumqx > best * sumq2:
                d = sumqx / sumq2
                best = d * sumqx
        scale = d
    id_ = f(1) / scale if scale != 0 else f(0)
    L = [best_index(id_ * xj) for xj in x]
    return np.float16(scale).tobytes() + bytes(L[j] | (L[16 + j] << 4) for j in range(16))


def test_iq4_nl_equals_ggml_reference_transcription():
    rng = np.random.default_rng(11)
    x = np.concatenate([
        edge_rows().reshape(-1, 32),
        rng.standard_normal((12, 32)) * np.array([1e-3, 1, 50] * 4)[:, None],
        rng.standard_cauchy((6, 32)), np.full((1, 32), 1e-16),
    ]).astype(np.float32)
    got = quantize(torch.from_numpy(x), T.IQ4_NL).numpy()
    with np.errstate(all="ignore"):
        ref = np.stack([np.frombuffer(iq4_nl_block_ref(row), dtype=np.uint8) for row in x])
    bad = np.nonzero((got != ref).any(axis=1))[0]
    assert bad.size == 0, f"blocks {bad.tolist()} differ: {got[bad[0]].tolist()} vs {ref[bad[0]].tolist()}"


# max |dequantize(quantize(x)) - x| per 32-block, as a fraction of the block's amax
ROUND_TRIP_BOUND = {T.Q8_0: 0.006, T.Q5_1: 0.035, T.Q5_0: 0.065, T.Q4_1: 0.07, T.Q4_0: 0.13, T.IQ4_NL: 0.11,
                   T.MXFP4: 0.25}  # MXFP4: the gap 8..12 of its doubled E2M1 values at amax < 16 d


@pytest.mark.parametrize("qtype", sorted(ROUND_TRIP_BOUND), ids=lambda t: t.name)
def test_round_trip_error_bound(qtype):
    x = torch.from_numpy(sample_rows(5))  # [3, 4, 256]
    y = dequantize(quantize(x, qtype), qtype, tuple(x.shape))
    err = (y - x).abs().reshape(-1, 32).amax(-1)
    amax = x.abs().reshape(-1, 32).amax(-1)
    assert bool((err <= ROUND_TRIP_BOUND[qtype] * amax).all()), f"{qtype.name}: worst {float((err / amax).max()):.4f}"


def test_iq4_nl_beats_q4_0_on_gaussian_rows():
    """The non-linear grid plus the scale search must pay off against plain 4-bit absmax."""
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    rms = {}
    for qt in (T.Q4_0, T.IQ4_NL):
        rms[qt] = float((dequantize(quantize(x, qt), qt, (64, 256)) - x).pow(2).mean().sqrt())
    assert rms[T.IQ4_NL] < 0.9 * rms[T.Q4_0], rms


def test_float_types_round_trip_and_input_dtype():
    x = torch.randn(4, 64)
    assert torch.equal(dequantize(quantize(x, T.F32), T.F32, (4, 64)), x)
    assert torch.equal(dequantize(quantize(x, T.F16), T.F16, (4, 64)), x.half().float())
    assert torch.equal(dequantize(quantize(x, T.BF16), T.BF16, (4, 64)), x.bfloat16().float())
    xb = x.bfloat16()  # non-f32 input is converted first, like ggml's from_float of an f32 copy
    assert torch.equal(quantize(xb, T.Q8_0), quantize(xb.float(), T.Q8_0))


def test_quantize_errors():
    with pytest.raises(ValueError, match=r"row of 48 elements .* Q4_0 block size \(32\)"):
        quantize(torch.zeros(2, 48), T.Q4_0)
    with pytest.raises(NotImplementedError, match="Q4_K"):
        quantize(torch.zeros(256), T.Q4_K)
    assert T.IQ4_NL in QUANTIZE_TYPES


def test_q8_0_speed_kv_rows():
    """[512, 576] fp32 -> q8_0 within 8x the same arithmetic in plain torch ops (per-block
    amax, scale, round to int8, f16 scales; ~3.5x here: the packing adds the rest), best of
    20 each, interleaved, one thread: a ratio measured in the test, not a machine's ms."""
    x = torch.randn(512, 576)

    def baseline():
        b = x.view(-1, 32)
        d = b.abs().amax(1, keepdim=True) / 127
        return torch.round(b / d.clamp_min(1e-30)).to(torch.int8), d.half()

    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        quantize(x, T.Q8_0)
        baseline()
        best, base = float("inf"), float("inf")
        for _ in range(20):
            t0 = time.perf_counter()
            quantize(x, T.Q8_0)
            best = min(best, time.perf_counter() - t0)
            t0 = time.perf_counter()
            baseline()
            base = min(base, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(n_threads)
    assert best < 8 * base, f"q8_0 quantize of [512, 576] took {best * 1e3:.2f} ms, {best / base:.1f}x the torch baseline's {base * 1e3:.2f} ms"


GGML_BASE = Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin/libggml-base.so"


@pytest.mark.skipif(not GGML_BASE.is_file(), reason=f"ggml's C library not built ({GGML_BASE})")
def test_iq4_xs_equals_ggml_c_reference():
    """quantize(IQ4_XS) against ggml's own quantize_row_iq4_xs_ref (gguf.quants has no IQ4_XS
    quantizer), called through ctypes: magnitudes 1e-4..1e3, heavy tails, zero and tiny rows."""
    ref_row = ctypes.CDLL(str(GGML_BASE)).quantize_row_iq4_xs_ref
    ref_row.argtypes, ref_row.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    rng = np.random.default_rng(3)
    x = np.ascontiguousarray(np.concatenate([
        rng.standard_normal((40, 256)) * np.logspace(-4, 3, 40)[:, None], rng.standard_cauchy((20, 256)),
        np.zeros((1, 256)), np.full((1, 256), 1e-16), np.concatenate([np.zeros(128), rng.standard_normal(128)])[None],
    ]).astype(np.float32))
    ref = np.zeros((x.shape[0], 136), np.uint8)
    for i in range(x.shape[0]):
        ref_row(x[i].ctypes.data, ref[i].ctypes.data, 256)
    got = quantize(torch.from_numpy(x), T.IQ4_XS).numpy()
    bad = np.nonzero((got != ref).any(axis=1))[0]
    assert bad.size == 0, f"rows {bad.tolist()} differ: {got[bad[0]].tolist()} vs {ref[bad[0]].tolist()}"


def test_iq4_xs_round_trip_per_super_block():
    """IQ4_XS's sub-scales are 6 bits of the super-block's largest: a sub-block far below an
    outlier's can round to scale 0, so the bound is per 256 (measured 0.07-0.093 on 5 seeds)."""
    for seed in range(3):
        x = torch.from_numpy(sample_rows(seed))
        y = dequantize(quantize(x, T.IQ4_XS), T.IQ4_XS, tuple(x.shape))
        err = (y - x).abs().reshape(-1, 256).amax(-1) / x.abs().reshape(-1, 256).amax(-1)
        assert float(err.max()) <= 0.11
