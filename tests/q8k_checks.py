"""Checks shared by the Q8_K batched-row kernels' tests (test_q8k4.py: AVX2's 5-63 rows,
test_q8kz.py: AVX-512 VNNI's 16-127 rows): lp_mm called plainly, and the outlier rule."""
from __future__ import annotations

import gguf
import pytest
import torch

from llamapy.model.block_matrix import block_matrix
from test_kernels import _matrix, q8k_rounded


def mm_plain(m, x: torch.Tensor) -> torch.Tensor:
    """lp_mm itself (no int8 panels or dense path)."""
    y = torch.zeros(x.shape[0], m.n_out)
    m._mm(x.contiguous(), y, accumulate=False, int8=0)
    return y


def close(y: torch.Tensor, want: torch.Tensor, tol: float) -> bool:
    """Within tol of want's largest |value|."""
    return (y - want).abs().max().item() <= tol * want.abs().max().item()


def check_outlier_rows(lib, qtype: gguf.GGMLQuantizationType, seed: int, rows_taken: int) -> None:
    """16 rows x 2048 of `qtype`: a row with a block whose max |x| is over 8x its rms takes the
    int16 one-row product (within 1e-4 of the exact product), the others stay Q8_K bit for bit;
    5 such rows of 16 send the whole product to the int16 lanes.  Skips where `rows_taken` rows
    of this type do not read Q8_K on this library's level."""
    shape = (45, 2048)
    raw, W = _matrix(qtype, shape, seed=seed)
    m = block_matrix([(raw, qtype, shape)], lib)
    x = torch.randn(16, shape[1], generator=torch.Generator().manual_seed(seed + 1))
    if not lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), shape[1], rows_taken):
        pytest.skip(f"{lib.isa}: a batched decode's {qtype.name} in int16 (VNNI: AVX-512's 16+ rows in test_q8kz.py; or not x86)")
    clean = mm_plain(m, x)
    x[3, 700] = 60.0
    assert not lib.fn.lp_q8k_takes(int(qtype), x.data_ptr(), shape[1], 16)
    exact = (x.double() @ W.double().T).float()
    want = (q8k_rounded(x).double() @ W.double().T).float()
    y = mm_plain(m, x)
    assert close(y[3], exact[3], 1e-4)
    assert not close(want[3], exact[3], 1e-3)  # (Q8_K would show)
    keep = [r for r in range(16) if r != 3]
    assert torch.equal(y[keep], clean[keep])
    x[[5, 7, 9, 11], 100] = 60.0
    exact = (x.double() @ W.double().T).float()
    y = mm_plain(m, x)
    assert ((y - exact).abs().max(-1).values <= 1e-4 * exact.abs().max(-1).values).all()
