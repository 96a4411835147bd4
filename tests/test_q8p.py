"""Prompt-sized (64+ rows) Q4_K / Q5_K / Q6_K products at the AVX2 level without VNNI against ggml's
Q8_K activations (kernels/c/q8p_x86.c, q8mm_x86.c q8p_mm): each row within 1e-5 of the Q8_K-rounded
exact product at every row count 64..520, each row the same whatever the batch, a weight-row tail,
the accumulate flag, and the outlier rule (a row with a block of 256 whose max |x| is over 8x its rms
takes the int8 rows with a scale per 32 and their residual pass)."""
from __future__ import annotations

import gguf
import pytest
import torch

from kernel_level import kernels_at
from test_kernels import _matrix, q8k_rounded
from test_q8mm import product

T = gguf.GGMLQuantizationType
TYPES = [T.Q4_K, T.Q5_K, T.Q6_K]


@pytest.fixture(scope="module", params=["native", "avx2", "scalar"])
def lib(request):
    k = kernels_at(request.param)
    if not k.fn.lp_q8p_covers(int(T.Q4_K)):
        pytest.skip(f"{k.isa}: no Q8_K prompt panel at this level (AVX2 without VNNI only; or LLAMAPY_Q8P=0)")
    return k


def worst(y: torch.Tensor, want: torch.Tensor) -> float:
    """The largest |y - want| over want's largest |value|, per row's worst."""
    return ((y.double() - want.double()).abs().max() / want.abs().max()).item()


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_rows_are_the_q8k_product(lib, qtype):
    """61 weight rows (7 panels of 8 and a tail of 5) x 1024 (4 super-blocks): every row count from
    64 to 520 (tiles of 4 and a last tile of 1..3) within 1e-5 of the Q8_K-rounded exact product
    (the rounding itself moves it ~1e-2, so a wrong scale, minimum or lane shows), each row bit for
    bit the same at every row count, and the residual add."""
    shape = (61, 1024)
    raw, W = _matrix(qtype, shape, seed=31)
    x = torch.randn(520, shape[1], generator=torch.Generator().manual_seed(32))
    want = (q8k_rounded(x).double() @ W.double().T).float()
    exact = (x.double() @ W.double().T).float()
    assert worst(want, exact) > 1e-3  # (the rounding shows)
    y520 = product(lib, qtype, raw, shape, x)
    assert worst(y520, want) <= 1e-5
    for n in (64, 65, 66, 67, 100, 129, 255, 256, 383, 519):
        y = product(lib, qtype, raw, shape, x[:n].contiguous())
        assert worst(y, want[:n]) <= 1e-5, n
        assert torch.equal(y, y520[:n]), n
    acc = product(lib, qtype, raw, shape, x[:67].contiguous(), accumulate=1)
    assert torch.equal(acc - 1, y520[:67]) or (acc - 1 - y520[:67]).abs().max().item() <= 1e-6 * want.abs().max().item()


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_largest_quants_do_not_overflow(lib, qtype):
    """Every quant and scale bit set (15, 31, Q6_K's 63 with scale -1; 6-bit scales and mins 63)
    against activations all +-1 (Q8_K's +-127): the int16 sums at their bound, the int32 sums of a
    super-block, the mins' and Q6_K's offset's integer sums, and the product still the exact one."""
    n_out, n_in = 16, 512
    qk, bb = gguf.GGML_QUANT_SIZES[qtype]
    blocks = torch.full((n_out * n_in // qk, bb), 0xFF, dtype=torch.uint8).numpy()
    d = torch.tensor([1e-3], dtype=torch.float16).view(torch.uint8).numpy()
    for at in ([bb - 2] if qtype == T.Q6_K else [0, 2]):
        blocks[:, at:at + 2] = d
    raw = torch.from_numpy(blocks.reshape(-1).copy())
    W = torch.from_numpy(gguf.quants.dequantize(blocks.reshape(n_out, -1), qtype)).double()
    x = torch.ones(67, n_in)
    x[1::2] = -1.0
    x[2::3, ::2] = -1.0
    want = q8k_rounded(x).double() @ W.T
    y = product(lib, qtype, raw, (n_out, n_in), x)
    assert worst(y, want) <= 1e-6


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_outlier_rows_take_int8_rows(lib, qtype):
    """A row with a block of 256 whose max |x| is over 8x its rms (x[r, 700] = 60) leaves Q8_K: its
    product is the int8 rows' with the residual pass, bit for bit the product with the switch off
    (lp_q8p_set: every row there), its distance from the exact product under a fifth of Q8_K's; the
    other rows' bits unchanged by those rows, and their Q8_K product not the switch-off one; both kinds
    added into y with accumulate."""
    shape = (45, 1024)
    raw, W = _matrix(qtype, shape, seed=33)
    x = torch.randn(70, shape[1], generator=torch.Generator().manual_seed(34))
    clean = product(lib, qtype, raw, shape, x)
    for r in (3, 41, 69):
        x[r, 700] = 60.0
    exact = (x.double() @ W.double().T).float()
    want = (q8k_rounded(x).double() @ W.double().T).float()
    y = product(lib, qtype, raw, shape, x)
    keep = [r for r in range(70) if r not in (3, 41, 69)]
    assert torch.equal(y[keep], clean[keep])
    for r in (3, 41, 69):  # (Q8_K's one scale for the block of 60 would show: ~10x the error)
        assert worst(y[r], exact[r]) <= 0.2 * worst(want[r], exact[r]), r
    acc = product(lib, qtype, raw, shape, x, accumulate=1)  # (both kinds of rows added into y's ones)
    assert (acc - 1 - y).abs().max().item() <= 1e-6 * exact.abs().max().item()
    was = lib.fn.lp_q8p_set(0)
    try:
        old = product(lib, qtype, raw, shape, x)
    finally:
        lib.fn.lp_q8p_set(was)
    assert torch.equal(old[[3, 41, 69]], y[[3, 41, 69]])
    assert worst(old[keep], want[keep]) > 1e-4  # (the int8 rows per 32 are not Q8_K's)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n_out", [40, 29, 21, 8])
def test_two_panel_tiles_and_their_tails(lib, qtype, n_out):
    """q8mm_x86.c hands lp_q8p_panel two panels (16 weight rows) a call, Q4_K / Q5_K taking them 3
    activation rows x 16 at a time: n_out 40 (a last odd panel of 8), 29 (a second panel of 5), 21
    (a last single panel of 5), 8 (one panel only), at 64 / 65 / 66 rows (last tiles of 1, 2, 3 rows):
    every row within 1e-5 of the Q8_K-rounded exact product and bit for bit the same at every row count."""
    shape = (n_out, 512)
    raw, W = _matrix(qtype, shape, seed=35)
    x = torch.randn(130, shape[1], generator=torch.Generator().manual_seed(36))
    want = (q8k_rounded(x).double() @ W.double().T).float()
    y130 = product(lib, qtype, raw, shape, x)
    assert worst(y130, want) <= 1e-5
    for n in (64, 65, 66, 67, 68):
        y = product(lib, qtype, raw, shape, x[:n].contiguous())
        assert worst(y, want[:n]) <= 1e-5, n
        assert torch.equal(y, y130[:n]), n
