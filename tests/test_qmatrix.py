"""QMatrix: weights kept quantized, multiplied by real kernels.  Each path against the
exact float32 product of gguf's own dequantization."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from llamapy.model.qmatrix import DENSE_ROWS, REFINE_TOP, make_qmatrix

T = gguf.GGMLQuantizationType


def _raw(w: np.ndarray, qtype: T) -> torch.Tensor:
    return torch.from_numpy(gguf.quants.quantize(w, qtype)).view(torch.uint8).reshape(-1)


def _ref(raw: torch.Tensor, qtype: T, shape) -> torch.Tensor:
    return torch.from_numpy(gguf.quants.dequantize(raw.numpy().reshape(shape[0], -1), qtype).astype(np.float32))


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q8_0])
@pytest.mark.parametrize("rows", [1, 5, DENSE_ROWS + 3])
@pytest.mark.parametrize("shape", [(96, 128), (128, 96)], ids=["probed-layout", "blocked-layout"])
def test_paths_match_exact_product(qtype, rows, shape):
    rng = np.random.default_rng(0)
    w = rng.standard_normal(shape).astype(np.float32)
    raw = _raw(w, qtype)
    m = make_qmatrix([(raw, qtype, shape)], exact=False, dense_dtype=torch.float32, slot_orders={})
    assert m.kind == ("q8_0" if qtype == T.Q8_0 else "int4")
    W = _ref(raw, qtype, shape)
    Wk = m.dequant()  # the weights the kernels multiply by, whatever the layout
    if qtype == T.Q8_0:  # the file's f16 scales are kept: exact
        torch.testing.assert_close(Wk, W, atol=1e-6, rtol=0)
    else:  # one bf16 (scale, zero') per group: within 2^-8 of the largest weight
        assert (Wk - W).abs().max().item() <= 2**-8 * W.abs().max().item()
    x = torch.from_numpy(rng.standard_normal((rows, shape[1])).astype(np.float32))
    y, ref = m(x), x @ W.T
    # int4 (and q8_0 outside its refined top outputs): bf16 activations, group scales and
    # outputs, fp32 accumulation; q8_0 with many rows: f32 GEMM of the exact weights
    exact_path = qtype == T.Q8_0 and rows >= DENSE_ROWS
    tol = 1e-5 if exact_path else 8e-3
    assert (y - ref).abs().max().item() <= tol * ref.abs().max().item()
    if qtype == T.Q8_0:  # argmax exact: refined (few rows) or exact product (many)
        assert torch.equal(y.argmax(1), ref.argmax(1))
    else:  # the kernel is exactly its bf16 arithmetic: a wrong layout or table would be O(1) off
        ref_k = x.bfloat16().float() @ Wk.bfloat16().float().T
        assert (y - ref_k).abs().max().item() <= 2**-7 * ref_k.abs().max().item()


@pytest.mark.parametrize("qtype", [T.Q4_1, T.Q8_0])
def test_no_rows(qtype):  # a ubatch that asks for no logits
    raw = _raw(np.ones((64, 64), dtype=np.float32), qtype)
    m = make_qmatrix([(raw, qtype, (64, 64))], exact=False, dense_dtype=torch.float32, slot_orders={})
    assert m(torch.zeros(0, 64)).shape == (0, 64)


def test_q8_0_rows_and_embeddings_exact():
    rng = np.random.default_rng(3)
    for shape in [(192, 64), (96, 64)]:  # blocked layout, probed layout
        raw = _raw(rng.standard_normal(shape).astype(np.float32), T.Q8_0)
        m = make_qmatrix([(raw, T.Q8_0, shape)], exact=False, dense_dtype=torch.float32, slot_orders={})
        ids = torch.tensor([0, 5, 31, 32, 63, 64, shape[0] - 1, 5])
        torch.testing.assert_close(m.get_rows(ids), _ref(raw, T.Q8_0, shape)[ids], atol=0, rtol=0)


def test_q8_0_refined_top_outputs_are_exact():
    rng = np.random.default_rng(1)
    shape = (4 * REFINE_TOP, 64)
    raw = _raw(rng.standard_normal(shape).astype(np.float32), T.Q8_0)
    m = make_qmatrix([(raw, T.Q8_0, shape)], exact=False, dense_dtype=torch.float32, slot_orders={})
    x = torch.from_numpy(rng.standard_normal((2, shape[1])).astype(np.float32))
    y, ref = m(x), x @ _ref(raw, T.Q8_0, shape).T
    top = ref.topk(REFINE_TOP // 2, dim=1).indices
    torch.testing.assert_close(y.gather(1, top), ref.gather(1, top), atol=1e-5, rtol=1e-6)


def test_fused_matrices_equal_separate_ones():
    rng = np.random.default_rng(2)
    shapes = [(64, 96), (32, 96), (32, 96)]
    parts = [(_raw(rng.standard_normal(s).astype(np.float32), T.Q4_1), T.Q4_1, s) for s in shapes]
    fused = make_qmatrix(parts, exact=False, dense_dtype=torch.float32, slot_orders={})
    x = torch.from_numpy(rng.standard_normal((3, 96)).astype(np.float32))
    sep = torch.cat([make_qmatrix([p], exact=False, dense_dtype=torch.float32, slot_orders={})(x) for p in parts], 1)
    torch.testing.assert_close(fused(x), sep, atol=1e-6, rtol=0)
    assert fused.n_out == 128


def test_resident_bytes_close_to_file(smollm2):
    ratio = smollm2.n_bytes_resident / smollm2.n_bytes_file
    print(f"resident {smollm2.n_bytes_resident / 2**20:.2f} MiB, file {smollm2.n_bytes_file / 2**20:.2f} MiB, ratio {ratio:.3f}")
    assert ratio <= 1.1
