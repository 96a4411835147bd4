"""--deterministic on the tiny families (tests/tiny_family.py) in every weight type they are
written in, and a tiny llama in K-quants: a prompt's logits decoded as one ubatch are finite,
bit-equal to the same prompt decoded a token at a time, and within rounding of the default
run's (decoded a token at a time: the default's few-row path is a timed choice, bf16 on some
machines).  phi3's fused Q|K|V and gate|up matrices go through the fused C layers (layers.c): in a
type rows_det_x86.c does not cover (F32, F16, BF16) the ubatches are one row and the default
one-row products run; in a covered one (Q8_0, Q4_K, Q6_K) the deterministic products do.
Issue 48: the fused layers once took the deterministic products for F16 rows (undecoded
scratch: NaN logits)."""
from __future__ import annotations

from pathlib import Path

import gguf
import pytest
import torch

from llamapy import Batch, Context, ContextParams
from llamapy.kernels.build import expected_level
from llamapy.model.model import Model
from tiny_family import F16, F32, Q8_0, write_tiny_family
from tiny_model import write_tiny_llama

T = gguf.GGMLQuantizationType
N_TOKENS = 12
FAMILY_CASES = [(a, t) for a in ("phi3", "qwen3", "gemma2") for t in (F32, F16, T.BF16, Q8_0)]
LLAMA_CASES = [T.Q4_K, T.Q6_K]  # K-quants: rows of 256 (n_embd 256, n_ff 512)


def _logits(model: Model, det: bool, one_by_one: bool) -> torch.Tensor:
    """The prompt's logits [N_TOKENS, n_vocab]: one decode of every token (-ub 64), or a decode
    per token."""
    ctx = Context(model, ContextParams(n_ctx=128, n_batch=64, n_ubatch=64, deterministic=det))
    toks = [(7 * i + 3) % 250 + 1 for i in range(N_TOKENS)]
    steps = [[i] for i in range(N_TOKENS)] if one_by_one else [list(range(N_TOKENS))]
    rows = []
    for step in steps:
        b = Batch()
        for i in step:
            b.add(toks[i], i, (0,), logits=True)
        ctx.decode(b)
        rows.append(ctx.get_logits().clone())
    return torch.cat(rows)


# At AVX-512 the 32-element types' deterministic products read int8 activations (det8_x86.c: ggml's Q8_0 form,
# llama.cpp's own; the default's one-row products read int16): on these tiny random models the logits then move
# 3.0% (phi3, qwen3) and 0.6% (gemma2) of their largest from the default's, top-1 unchanged.  At AVX2 every
# covered type reads int8 (det8_avx2_x86.c): the tiny llama's Q6_K logits move 4.9% (0.417 of 8.56); where the
# default's one row of a K-quant reads Q8_K (row1q8k_x86.c: avx2, and the VNNI levels off Zen 4) 3.7% (0.315).
# Since ffn_down's SwiGLU rows read Q8_K whatever their largest value (layers.c prep_ff_row, llama.cpp's rounding;
# AMD Zen 3 avx2) the default moves 5.1% (0.439 of 8.58, top-1 11 of 12; was 0.316, 10 of 12) from the exact
# weights (Model.load exact=True), --deterministic 3.1% (0.264, 12 of 12): the two 6.8% (0.581; was 0.417) apart.
INT8_TOL = 7.5e-2
READS_I8 = 8  # kernels/c/mm.h LP_READS_I8
READS_KZ = 33  # kernels/c/mm.h LP_READS_Q8K | LP_READS_INTS (det_kz_x86.c: ggml's Q8_K for a row without an outlier block)
READS_L8 = (64, 128)  # kernels/c/rows_det_x86.h LP_READS_L8_4 / _5: AVX2's 32-element types, int8 (x8 or the int8 lanes)


def _tol(wtype: T) -> float:
    from llamapy.kernels import load_kernels

    lib = load_kernels()
    if lib is None:
        return 5e-3
    x = torch.ones(256)  # no outlier block: does the default's one row of this type read Q8_K here?
    q8k = lib.fn.lp_q8k_takes(int(wtype), x.data_ptr(), 256, 1)
    return INT8_TOL if lib.fn.lp_det_reads(int(wtype)) in (READS_I8, READS_KZ, *READS_L8) or q8k else 5e-3


def _check(model: Model, tol: float = 5e-3) -> None:
    det = _logits(model, True, False)
    assert torch.isfinite(det).all(), "NaN / inf logits under --deterministic"
    assert torch.equal(det, _logits(model, True, True)), "a row's logits depend on the ubatch under --deterministic"
    plain = _logits(model, False, True)  # the default a token at a time: its one-row products, whatever
    # the kernels' timed choice for a few rows was (bf16 tiles: rounding far past 5e-3 on these files)
    err, scale = (det - plain).abs().max().item(), plain.abs().max().item()
    assert err < tol * scale, (err, scale)
    same = (det.argmax(-1) == plain.argmax(-1)).sum().item()
    # int8 reads: two roundings of x apart.  The tiny llama's Q6_K at AVX2: the default's one-row Q8_K
    # (row1q8k_x86.c) flips 2 of 12 top-1 against the fp32 PyTorch path (LLAMAPY_KERNELS=0; max |diff| 0.32 of
    # 8.6), --deterministic's int8 per 32 none (0.26): the two agree on 10
    assert same == len(det) if tol < INT8_TOL else same >= len(det) - 2, same


@pytest.mark.parametrize("arch,wtype", FAMILY_CASES, ids=[f"{a}-{t.name}" for a, t in FAMILY_CASES])
def test_family_deterministic(tmp_path: Path, arch: str, wtype: T) -> None:
    model = Model.load(write_tiny_family(tmp_path / f"{arch}.gguf", arch, wtype))
    fused = getattr(model.net, "fused", None)
    calls = fused.calls if fused is not None else 0
    _check(model, _tol(wtype))
    if arch in ("phi3", "qwen3"):  # the fused C layers took the ubatches
        assert fused is not None and fused.calls > calls


@pytest.mark.parametrize("wtype", LLAMA_CASES, ids=[t.name for t in LLAMA_CASES])
def test_llama_k_quants_deterministic(tmp_path: Path, wtype: T) -> None:
    model = Model.load(write_tiny_llama(tmp_path / "llama.gguf", n_embd=256, n_ff=512, weight_type=wtype))
    assert model.net.fused is not None
    if expected_level() in ("avx2", "avx512"):  # x86's lanes cover the K-quants; elsewhere one-row ubatches
        assert model.net.fused.det_covered
    _check(model, _tol(wtype))  # at AVX2 the K-quants read int8 too (det8_avx2_x86.c): Q6_K 4.9% of the largest
