"""One decode row's MoE FFN (kernels/c/moe.c lp_moe_row): the experts' down products read the
SwiGLU rows in ggml's Q8_K form whatever their largest value, as llama.cpp rounds them (the
outlier rule of lp_prepare_q8k_row, which keeps a row with a block over 8x its rms in the int16
form for the dense products, is not applied there).  Where this library's level reads no Q8_K
for one Q4_K / Q6_K row (scalar, VNNI, not x86), skipped."""
from __future__ import annotations

import gguf
import pytest
import torch
from test_kernels import _matrix, q8k_rounded

from llamapy.kernels import load_kernels

T = gguf.GGMLQuantizationType
N_EMBD, N_FF, N_EXPERT, K = 256, 512, 4, 2


def _stack(parts: list[torch.Tensor]) -> tuple[torch.Tensor, int]:
    """The experts' raw matrices back to back (uint8), and the bytes from one to the next."""
    return torch.cat(parts).contiguous(), parts[0].numel()


@pytest.mark.parametrize("down", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_swiglu_rows_read_q8k_with_outliers(down):
    lib = load_kernels()
    if lib is None:
        pytest.skip("no CPU kernels")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, N_EMBD, generator=g)
    probe = torch.randn(1, N_FF, generator=g)
    if not lib.fn.lp_q8k_takes(int(down), probe.data_ptr(), N_FF, 1):
        pytest.skip(f"{lib.isa}: one {down.name} row is not read in Q8_K at this level")
    # F16 gate / up (float products: h known to float32's rounding); their row 7 along x, so that
    # every SwiGLU row has a block whose largest |h| (~6.4^2) is far over 8x its rms
    wg, wu, wd, Wg, Wu, Wd = [], [], [], [], [], []
    for e in range(N_EXPERT):
        for raws, Ws, seed, scale in ((wg, Wg, 10 + e, 0.1), (wu, Wu, 20 + e, 0.1)):
            W = torch.randn(N_FF, N_EMBD, generator=torch.Generator().manual_seed(seed)) * scale
            W[7] = x[0] / x.norm() * 0.4
            W = W.half()
            raws.append(W.view(torch.uint8).reshape(-1))
            Ws.append(W.float())
        raw, W = _matrix(down, (N_EMBD, N_FF), seed=30 + e)
        wd.append(raw)
        Wd.append(W)
    router = torch.randn(N_EXPERT, N_EMBD, generator=g)
    (bg, sg), (bu, su), (bd, sd) = _stack(wg), _stack(wu), _stack(wd)
    y = torch.zeros(1, N_EMBD)
    sel = torch.empty(K, dtype=torch.int64)
    wsel = torch.empty(K, dtype=torch.float32)
    rc = lib.fn.lp_moe_row(x.data_ptr(), router.data_ptr(), N_EXPERT, K, bg.data_ptr(), bu.data_ptr(), bd.data_ptr(),
                           int(T.F16), int(T.F16), int(down), sg, su, sd, N_EMBD, N_FF, y.data_ptr(), sel.data_ptr(),
                           wsel.data_ptr())
    assert rc == 0
    want = torch.zeros(1, N_EMBD, dtype=torch.float64)
    exact = torch.zeros(1, N_EMBD, dtype=torch.float64)
    for e, w in zip(sel.tolist(), wsel.tolist()):
        h = torch.nn.functional.silu(x @ Wg[e].T) * (x @ Wu[e].T)  # [1, N_FF]
        hb = h.reshape(-1, 256)
        assert (hb.abs().amax(-1) ** 2 * 256 > 64 * (hb * hb).sum(-1)).any()  # an outlier block: the rule fails
        want += w * (q8k_rounded(h).double() @ Wd[e].double().T)
        exact += w * (h.double() @ Wd[e].double().T)
    err_q8k, err_exact = (y.double() - want).abs().max().item(), (y.double() - exact).abs().max().item()
    gap = (want - exact).abs().max().item()
    assert gap > 1e-3 * exact.abs().max().item()  # Q8_K's rounding shows against the exact sums
    assert err_q8k < 0.05 * gap, (err_q8k, err_exact, gap)
