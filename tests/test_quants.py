"""dequantize / unpack_q4_affine against gguf.quants (numpy reference), on random blocks and real tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf import quants as gq
from gguf.constants import GGML_QUANT_SIZES

from llamapy.gguf.quants import (
    DEQUANTIZE_TYPES,
    Q4_AFFINE_TYPES,
    dequantize,
    row_size,
    type_size,
    unpack_q4_affine,
)

BLOCK_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.IQ4_NL, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
               T.IQ4_XS, T.MXFP4]
# byte offsets of the fp16 fields inside one block of each type
F16_FIELDS = {
    T.Q4_0: (0,), T.Q4_1: (0, 2), T.Q5_0: (0,), T.Q5_1: (0, 2), T.Q8_0: (0,), T.IQ4_NL: (0,),
    T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,),
    T.IQ4_XS: (0,), T.MXFP4: (),  # MXFP4: no f16 field (its scale is one E8M0 byte)
}


def random_blocks(qtype: T, n_blocks: int, seed: int) -> np.ndarray:
    """[n_blocks, type_size] random bytes whose fp16 fields are finite halves (zeros, subnormals, up to 65504),
    plus two edge blocks: every bit set (fp16 fields at the largest finite half) and all zero."""
    _, ts = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    b[-2] = 0xFF
    b[-1] = 0
    for off in F16_FIELDS[qtype]:
        h = rng.integers(0, 1 << 16, size=n_blocks, dtype=np.uint16)
        h = np.where((h & 0x7C00) == 0x7C00, h & 0xBFFF, h)  # exponent 31 (inf/nan) -> finite
        h[-2], h[-1] = 0x7BFF, 0
        b[:, off : off + 2] = h.astype("<u2").view(np.uint8).reshape(n_blocks, 2)
    return b


def assert_bits_equal(got: torch.Tensor, ref: np.ndarray) -> None:
    assert got.dtype == torch.float32 and tuple(got.shape) == ref.shape
    g, r = got.numpy().view(np.uint32), np.ascontiguousarray(ref, dtype=np.float32).view(np.uint32)
    bad = np.nonzero(g.ravel() != r.ravel())[0]
    first = bad[0] if bad.size else 0
    assert bad.size == 0, f"{bad.size} differ, first at {first}: {g.ravel()[first]:#x} vs {r.ravel()[first]:#x}"


def test_type_size_is_ggml_table():
    for qt in DEQUANTIZE_TYPES:
        assert type_size(qt) == GGML_QUANT_SIZES[qt]
        assert type_size(int(qt)) == GGML_QUANT_SIZES[qt]
    assert row_size(T.Q4_K, 512) == 2 * 144
    assert row_size(T.F16, 7) == 14
    with pytest.raises(ValueError, match=r"100 elements .* Q8_0 block size \(32\)"):
        row_size(T.Q8_0, 100)


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda t: t.name)
def test_dequantize_random_blocks_bit_exact(qtype):
    bs, _ = type_size(qtype)
    n_blocks = 3 * 2 * 4 + 2
    blocks = random_blocks(qtype, n_blocks, seed=int(qtype))
    ref = gq.dequantize(blocks, qtype).reshape(-1)
    got = dequantize(torch.from_numpy(blocks), qtype, (n_blocks * bs,))
    assert_bits_equal(got, ref)
    # the same bytes as a [3, 2, 4 blocks] tensor: rows follow the torch (reversed ne) order
    main = np.ascontiguousarray(blocks[:-2])
    got3 = dequantize(torch.from_numpy(main), qtype, (3, 2, 4 * bs))
    assert_bits_equal(got3, gq.dequantize(main.reshape(3, 2, -1), qtype))


def test_dequantize_float_types_every_half():
    all16 = np.arange(1 << 16, dtype=np.uint16)
    refs = {T.F16: all16.view(np.float16).astype(np.float32), T.BF16: gq.dequantize(all16.view(np.uint8), T.BF16)}
    for qt, ref in refs.items():
        got = dequantize(torch.from_numpy(all16.view(np.uint8).copy()), qt, (256, 256)).numpy().reshape(-1)
        nan = np.isnan(ref)
        assert np.array_equal(np.isnan(got), nan)
        # signalling-NaN payloads may come back quieted; everything else is bit-exact
        assert np.array_equal(got.view(np.uint32)[~nan], ref.view(np.uint32)[~nan]), qt.name
    x = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    assert_bits_equal(dequantize(torch.from_numpy(x.view(np.uint8).copy()), T.F32, (5, 7)), x)
    # a float32 tensor is accepted as its own bytes
    assert_bits_equal(dequantize(torch.from_numpy(x), T.F32, (35,)), x.reshape(-1))


def test_dequantize_errors_name_the_numbers():
    raw = torch.zeros(18 * 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"shape \(2, 96\) needs 108 bytes .* raw holds 72"):
        dequantize(raw, T.Q4_0, (2, 96))
    with pytest.raises(ValueError, match=r"40 elements .* Q4_0 block size \(32\)"):
        dequantize(raw, T.Q4_0, (4, 40))
    with pytest.raises(NotImplementedError, match="IQ2_XXS"):
        dequantize(raw, T.IQ2_XXS, (256,))


def test_q4_0_nibble_order_by_hand():
    """Independent of gguf: low nibbles are elements 0..15, high nibbles 16..31, value d*(q-8)."""
    j = np.arange(16, dtype=np.uint8)
    block = np.concatenate([np.array([0.5], dtype="<f2").view(np.uint8), j | ((15 - j) << 4)])
    got = dequantize(torch.from_numpy(block), T.Q4_0, (32,))
    expect = 0.5 * (np.concatenate([j, 15 - j]).astype(np.float32) - 8)
    assert np.array_equal(got.numpy(), expect)


def _smallest_per_type(path, per_type: int = 3):
    r = GGUFReader(path)
    by_type: dict[T, list] = {}
    for t in sorted(r.tensors, key=lambda t: t.n_bytes):
        by_type.setdefault(T(t.tensor_type), []).append(t)
    return {qt: ts[:per_type] for qt, ts in by_type.items()}


@pytest.fixture(scope="module")
def real_tensors(smollm2_path, gemma3_path):
    return {"smollm2": _smallest_per_type(smollm2_path), "gemma3": _smallest_per_type(gemma3_path)}


@pytest.mark.slow  # GGUFReader parses both vocabularies: ~15 s on 2 cores
def test_dequantize_real_tensors_bit_exact(real_tensors):
    seen = set()
    for model, by_type in real_tensors.items():
        for qt, tensors in by_type.items():
            for t in tensors:
                shape = tuple(reversed([int(n) for n in t.shape]))  # torch order = reversed GGUF ne
                if qt in (T.F32, T.F16):
                    assert shape == t.data.shape
                got = dequantize(torch.from_numpy(np.array(t.data)), qt, shape)
                assert_bits_equal(got, gq.dequantize(np.array(t.data), qt))
                seen.add((model, qt.name))
    expected = {("smollm2", "Q4_1"), ("smollm2", "Q8_0"), ("smollm2", "F32")}
    expected |= {("gemma3", name) for name in ("Q4_K", "Q6_K", "Q5_0", "Q8_0", "F32")}
    assert expected <= seen


def _affine_matches(raw: np.ndarray, qtype: T, shape: tuple[int, int]) -> None:
    n, k = shape
    q, scale, zero = unpack_q4_affine(torch.from_numpy(raw), qtype, shape)
    assert q.dtype == torch.uint8 and tuple(q.shape) == (n, k) and int(q.max()) <= 15
    assert tuple(scale.shape) == tuple(zero.shape) == (n, k // 32)
    assert scale.dtype == zero.dtype == torch.float32
    recon = q.float() * scale.repeat_interleave(32, -1) + zero.repeat_interleave(32, -1)
    assert torch.equal(recon, dequantize(torch.from_numpy(raw), qtype, shape)), qtype.name


@pytest.mark.parametrize("qtype", sorted(Q4_AFFINE_TYPES), ids=lambda t: t.name)
def test_unpack_q4_affine_random(qtype):
    bs, _ = type_size(qtype)
    _affine_matches(random_blocks(qtype, 4 * 3, seed=7 + int(qtype)), qtype, (3, 4 * bs))


@pytest.mark.slow
def test_unpack_q4_affine_real(real_tensors):
    checked = 0
    for by_type in real_tensors.values():
        for qt in Q4_AFFINE_TYPES & set(by_type):
            for t in by_type[qt]:
                _affine_matches(np.array(t.data), qt, tuple(reversed([int(n) for n in t.shape])))
                checked += 1
    assert checked >= 6  # smollm2's Q4_1 and gemma3's Q4_K


def test_unpack_q4_affine_rejects_other_types():
    with pytest.raises(NotImplementedError, match="Q8_0"):
        unpack_q4_affine(torch.zeros(34, dtype=torch.uint8), T.Q8_0, (1, 32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_bit_for_bit():
    from llamapy.gguf.quants import QUANTIZE_TYPES, quantize

    for qt in BLOCK_TYPES:
        bs, _ = type_size(qt)
        raw = torch.from_numpy(random_blocks(qt, 64, seed=3))
        cpu = dequantize(raw, qt, (8, 8 * bs))
        gpu = dequantize(raw.cuda(), qt, (8, 8 * bs)).cpu()
        assert torch.equal(gpu.view(torch.int32), cpu.view(torch.int32)), qt.name
        if qt in Q4_AFFINE_TYPES:
            for a, b in zip(unpack_q4_affine(raw.cuda(), qt, (8, 8 * bs)), unpack_q4_affine(raw, qt, (8, 8 * bs))):
                assert torch.equal(a.cpu(), b), qt.name
    x = torch.randn(16, 7, 256, generator=torch.Generator().manual_seed(0)) * torch.logspace(-4, 3, 16)[:, None, None]
    for qt in QUANTIZE_TYPES:
        assert torch.equal(quantize(x.cuda(), qt).cpu(), quantize(x, qt)), qt.name
