"""--deterministic's attention (attn.c lp_attn_det_for through api.c lp_attn_det_f16: each row over its own
cells, chunks and merge; over an f16 cache attn_det_x86.c at the AVX-512 level, attn_det_avx2_x86.c at AVX2,
attn.c's attn_group at the scalar level): a sequence's rows alone, all in one call, and in calls of 2..64 rows
shared with another sequence's rows, bit for bit (np.array_equal); and every row within float rounding of the
float64 softmax(q k * scale + mask) v.  SmolLM2's heads (9 over 3 KV heads of 64), Gemma 3's (4 over 1 of 256),
8 over 1 of 32 (two groups of 4 heads, the smallest head the AVX2 kernel reads), and 4 over 1 of 96 (the AVX2
kernel's 4-head weighted sums: 24 dims a pass, 32 and 256 leaving 8 and 16 over, 96 none); rows see 1..150 cells
(the kernels' 3-, 4- and 8-cell tails; from 64 cells a row alone takes several chunks, merged)."""
from __future__ import annotations

import numpy as np
import pytest

from llamapy.kernels import load_kernels
from test_deterministic_kernels import x86_levels

N_CELLS = 400  # the cache: the target's cells at every third slot after a shuffle, another sequence's between
T = 150  # the target sequence's rows: row i sees its first i + 1 cells
SHAPES = {"smollm2": (9, 3, 64), "gemma3": (4, 1, 256), "hpt8": (8, 1, 32), "hpt4x96": (4, 1, 96)}  # n_head, n_head_kv, d


@pytest.fixture(scope="module", params=x86_levels() + ["scalar"])
def lib(request):
    k = load_kernels(request.param)
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off")
    return k


def _cache(n_head_kv: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((N_CELLS, n_head_kv * d)).astype(np.float16)
    v = rng.standard_normal((N_CELLS, n_head_kv * d)).astype(np.float16)
    slots = np.sort(rng.permutation(N_CELLS)[: 2 * T])
    return k, v, slots[0::2], slots[1::2]  # the target's cells, the other sequence's


def attend(lib, shape, k, v, rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray:
    """lp_attn_det_f16 of rows (q [n_head d], visible cells, their mask values) in one call: [n, n_head d]."""
    n_head, n_head_kv, d = shape
    n = len(rows)
    q = np.ascontiguousarray(np.stack([r[0] for r in rows]), dtype=np.float32)
    ptr = np.zeros(n + 1, np.int64)
    ptr[1:] = np.cumsum([len(r[1]) for r in rows])
    cells = np.ascontiguousarray(np.concatenate([r[1] for r in rows]), dtype=np.int64)
    mask = np.full((n, N_CELLS), -np.inf, np.float32)
    for i, (_, c, m) in enumerate(rows):
        mask[i, c] = m
    out = np.full((n, n_head * d), np.nan, np.float32)
    assert lib.fn.lp_attn_det_f16(q.ctypes.data, n, n_head * d, n_head, n_head_kv, d, d, k.ctypes.data, v.ctypes.data,
                                  N_CELLS, mask.ctypes.data, ptr.ctypes.data, cells.ctypes.data, d**-0.5,
                                  out.ctypes.data) == 0
    return out


def reference(shape, k, v, row) -> np.ndarray:
    """float64 softmax(q k * scale + mask) v per head: [n_head d]."""
    n_head, n_head_kv, d = shape
    q, cells, m = row
    out = np.zeros(n_head * d)
    for h in range(n_head):
        hk = h // (n_head // n_head_kv)
        kr = k[cells, hk * d : (hk + 1) * d].astype(np.float64)
        vr = v[cells, hk * d : (hk + 1) * d].astype(np.float64)
        s = kr @ q[h * d : (h + 1) * d].astype(np.float64) * d**-0.5 + m
        p = np.exp(s - s.max())
        out[h * d : (h + 1) * d] = p @ vr / p.sum()
    return out


def _rows(shape, cells: np.ndarray, seed: int):
    """A sequence's rows over its cells: row i sees cells[: i + 1], mask values 0 but for a few
    cells' small biases (as a model's own mask values would add)."""
    rng = np.random.default_rng(seed)
    n_head, _, d = shape
    bias = np.where(rng.random(len(cells)) < 0.1, rng.uniform(-2, 0, len(cells)), 0.0).astype(np.float32)
    q = (rng.standard_normal((len(cells), n_head * d)) * 1.5).astype(np.float32)
    return [(q[i], cells[: i + 1], bias[: i + 1]) for i in range(len(cells))]


@pytest.mark.parametrize("name", list(SHAPES))
def test_det_attention_rows_equal_alone(lib, name):
    shape = SHAPES[name]
    k, v, mine, other = _cache(shape[1], shape[2], seed=len(name))
    target, others = _rows(shape, mine, seed=1), _rows(shape, other, seed=2)
    alone = np.concatenate([attend(lib, shape, k, v, [r]) for r in target])
    got = {"one call": attend(lib, shape, k, v, target)}
    for size in (2, 5, 16, 64):  # calls of `size` rows, the other sequence's rows between the target's
        mixed = [r for pair in zip(target, others) for r in pair]
        outs = [attend(lib, shape, k, v, mixed[i : i + size]) for i in range(0, len(mixed), size)]
        got[f"{size} rows"] = np.concatenate(outs)[0::2]
    got["chunked 50 + 100"] = np.concatenate([attend(lib, shape, k, v, target[:50]), attend(lib, shape, k, v, target[50:])])
    bad = {key: float(np.abs(y - alone).max()) for key, y in got.items() if not np.array_equal(y, alone)}
    assert not bad, f"{lib.level}: rows differ from alone (max |diff|): {bad}"
    ref = np.stack([reference(shape, k, v, r) for r in target])
    err = np.abs(alone - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert err.max() < 1e-5, f"{lib.level}: relative error {err.max():.2e} at row {int(err.argmax())}"


def test_det_attention_row_that_sees_nothing(lib):
    """A row whose every visible cell is masked to -inf gets zeros (as the default attention)."""
    shape = SHAPES["gemma3"]
    k, v, mine, _ = _cache(shape[1], shape[2], seed=3)
    q = np.ones(shape[0] * shape[2], np.float32)
    out = attend(lib, shape, k, v, [(q, mine[:5], np.full(5, -np.inf, np.float32))])
    assert np.array_equal(out, np.zeros_like(out))
