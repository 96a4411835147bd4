"""The AVX2 level's int8 lanes (kernels/c/lanes8_x86.c; no VNNI): Q4_0 / Q4_1 / Q5_0 / Q5_1 against
2 or more activation rows read x as ggml's Q8_0 (one scale per 32, int8 rounded to nearest
even), as llama.cpp's AVX2 build does.  Held to that rounding's exact product (the integers
exact, only the float steps' order free), each row the same whatever the batch around it, and
the unsigned weights' offset at its extremes (every weight -16 / +15, activations +-127: the int16
sums' bound 4 x 2 x 31 x 127 = 31496)."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from llamapy.kernels.build import IsaError, cpu_features, resolve_level
from llamapy.model.block_matrix import block_matrix
from kernel_level import kernels_at
from test_kernels import _matrix, q8_0_rounded

T = gguf.GGMLQuantizationType
TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]
BLOCK_BYTES = {T.Q4_0: 18, T.Q4_1: 20, T.Q5_0: 22, T.Q5_1: 24}


@pytest.fixture(scope="module")
def avx2():
    return kernels_at("avx2")


def _q8_0_product(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """x W^T with x through ggml's Q8_0 form (the minimum's part too: the rounded values' sum, as
    llama.cpp's Q8_1 s), in float64."""
    return (q8_0_rounded(x).double() @ W.double().T).float()


def _runs(level: str) -> bool:
    try:
        resolve_level(level, *cpu_features())
    except IsaError:
        return False
    return True


def test_only_the_avx2_level_without_vnni_takes_it():
    for level in ("avx2", "avx2+vnni", "avx512", "scalar"):
        if not _runs(level):
            continue
        lib = kernels_at(level)
        for qtype in TYPES:
            assert bool(lib.fn.lp_lanes8_takes(int(qtype), 640, 16)) == (level == "avx2"), (level, qtype)
    lib = kernels_at("avx2")
    for qtype, n_in, n in ((T.Q8_0, 640, 16), (T.Q4_K, 512, 16), (T.Q5_0, 640, 1), (T.Q8_0, 640, 4),
                           (T.Q5_0, 656, 16)):  # Q8_0 and the K-quants keep their paths, one row det8_row_x86.c
        assert not lib.fn.lp_lanes8_takes(int(qtype), n_in, n), (qtype, n_in, n)
    for n in (2, 4, 5, 8, 12, 16, 17, 40, 63):  # every count from 2 (tests/test_row_counts_i8.py)
        assert lib.fn.lp_lanes8_takes(int(T.Q5_0), 640, n), n


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_rows_are_the_q8_0_product(avx2, qtype):
    """5..63 rows (a part-filled last lane group at 5, 17, 40 and 63) against 37 weight rows of 21
    blocks: each row within fp32 order of the Q8_0-rounded product, and the same bits whatever the
    batch it comes in (its own row of a 63-row product, a slice from row 10, a 16-row one)."""
    shape = (37, 672)
    raw, W = _matrix(qtype, shape, seed=41)
    m = block_matrix([(raw, qtype, shape)], avx2)
    x = torch.randn(63, shape[1], generator=torch.Generator().manual_seed(42)) * 3.0
    x[5, 40] = 90.0  # an outlier block: int8 still (llama.cpp's rounding), no int16 fallback
    ref = _q8_0_product(x, W)
    exact = (x.double() @ W.double().T).float()
    y63 = m(x)
    scale = ref.abs().max().item()
    assert (y63 - ref).abs().max().item() <= 2e-6 * scale
    assert (y63 - exact).abs().max().item() > 1e-4 * scale  # not the int16 form's rounding
    for n in (5, 8, 16, 17, 40):
        assert avx2.fn.lp_lanes8_takes(int(qtype), shape[1], n)
        assert torch.equal(m(x[:n]), y63[:n]), n
    assert torch.equal(m(x[10:26]), y63[10:26])
    acc = torch.ones(17, shape[0])
    m.add_into(x[:17], acc)
    assert (acc - 1 - y63[:17]).abs().max().item() <= 1e-6 * scale


def _extreme_matrix(qtype: T, n_out: int, n_in: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight rows at the type's extremes: row 0 all lowest (Q5_0 -16, Q4_0 -8, Q4_1 / Q5_1 0), row 1
    all highest (15, 7, 15, 31), row 2 alternating, the rest the pattern by block; d = 0.5 (f16), m = -1."""
    bb = BLOCK_BYTES[qtype]
    blocks = np.zeros((n_out, n_in // 32, bb), dtype=np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.float16(0.5).tobytes(), dtype=np.uint8)
    if qtype in (T.Q4_1, T.Q5_1):
        blocks[:, :, 2:4] = np.frombuffer(np.float16(-1.0).tobytes(), dtype=np.uint8)
    qh_at = {T.Q5_0: 2, T.Q5_1: 4}.get(qtype)
    qs_at = {T.Q4_0: 2, T.Q4_1: 4, T.Q5_0: 6, T.Q5_1: 8}[qtype]
    for o in range(n_out):
        for b in range(n_in // 32):
            kind = o if o < 3 else (o + b) % 3
            if kind == 1 or (kind == 2 and b % 2 == 0):  # all highest: every nibble and fifth bit set
                blocks[o, b, qs_at:qs_at + 16] = 0xFF
                if qh_at is not None:
                    blocks[o, b, qh_at:qh_at + 4] = 0xFF
            elif kind == 2:  # alternating highest / lowest values: low nibbles 15, high 0, fifth bits of the first 16
                blocks[o, b, qs_at:qs_at + 16] = 0x0F
                if qh_at is not None:
                    blocks[o, b, qh_at:qh_at + 2] = 0xFF
    raw = torch.from_numpy(blocks.reshape(-1).copy())
    W = torch.from_numpy(gguf.quants.dequantize(blocks.reshape(n_out, -1), qtype).astype(np.float32))
    return raw, W


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_offset_at_its_extremes(avx2, qtype):
    """Activations +-1 (every value 127 or -127 of its block's scale: rounded exactly) against the
    extreme weight rows, 16 and 21 rows: the product is x W^T itself (integers of up to 32 x 31 x 127
    a block), to fp32 order."""
    shape = (7, 320)
    raw, W = _extreme_matrix(qtype, *shape)
    m = block_matrix([(raw, qtype, shape)], avx2)
    sign = torch.ones(21, shape[1])
    sign[1::3] = -1.0  # rows all +1, all -1, and alternating by element
    sign[2::3, 1::2] = -1.0
    ref = (sign.double() @ W.double().T).float()
    for n in (16, 21):
        y = m(sign[:n])
        scale = ref[:n].abs().max().item()
        assert (y - ref[:n]).abs().max().item() <= 1e-6 * scale, n
