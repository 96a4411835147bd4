"""Every common GGUF type stays in its file's blocks and has kernels (issue: Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16, BF16, F32; and IQ4_NL, IQ4_XS, MXFP4): a tiny llama GGUF of each type
(gguf's quantizer where it has one, hand-packed blocks for the K-quants) loads with every
matrix a BlockMatrix holding exactly the file's bytes, each matrix dequantizes to gguf's own
dequantization of the tensor (read back by gguf.GGUFReader, an independent reader), and
decoding -- one row (the integer path), several rows (fp32 or bf16) and a prompt (dense
GEMM) -- gives the logits of the same file with every weight dequantized to float32."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from llamapy import Batch, Context, ContextParams, Model
from llamapy.kernels import load_kernels
from llamapy.model.block_matrix import BlockMatrix, dense_dtype
from tiny_model import write_tiny_llama

T = gguf.GGMLQuantizationType
TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS,
         T.MXFP4, T.F16, T.BF16, T.F32]

pytestmark = pytest.mark.skipif(load_kernels() is None, reason="no C compiler: the CPU kernels are off")


def _logits(model: Model) -> torch.Tensor:
    """A 40-token prompt for 3 sequences, then 2 steps of one token each (3 rows), then 2 steps
    of sequence 0 alone (1 row): every output's logits."""
    ctx = Context(model, ContextParams(n_ctx=512, n_seq_max=3, kv_unified=True))
    out = []
    b = Batch()
    for s in range(3):
        for i in range(40):
            b.add((3 + 7 * i + 11 * s) % model.n_vocab, i, [s], logits=i == 39)
    ctx.decode(b)
    out.append(ctx.get_logits().clone())
    for p in range(40, 44):
        b = Batch()
        for s in range(3 if p < 42 else 1):
            b.add((5 * p + s) % model.n_vocab, p, [s], logits=True)
        ctx.decode(b)
        out.append(ctx.get_logits().clone())
    return torch.cat(out)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_type_in_its_blocks(tmp_path, qtype):
    path = write_tiny_llama(tmp_path / f"{qtype.name}.gguf", n_embd=256, n_head=4, n_head_kv=2, n_ff=512,
                            weight_type=qtype)
    model = Model.load(path)
    L = model.net.layers[0]
    mats = {"blk.0.attn_output.weight": L.wo, "blk.0.ffn_down.weight": L.ffn_down}
    for m in (L.wqkv, L.wo, L.ffn_gate_up, L.ffn_down, model.net.tok_embd):
        assert isinstance(m, BlockMatrix) and m.qtype == qtype
    matrices = [t for t in model.gguf.tensors.values() if len(t.ne) == 2]
    vectors = [t for t in model.gguf.tensors.values() if len(t.ne) == 1]
    f32_vectors = sum(4 * t.ne[0] for t in vectors)
    assert model.n_bytes_resident == sum(t.n_bytes for t in matrices) + f32_vectors  # the file's bytes
    reader = gguf.GGUFReader(str(path))
    for t in reader.tensors:
        if t.name in mats:
            ref = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(mats[t.name].n_out, -1)
            assert torch.equal(mats[t.name].dequant(), torch.from_numpy(np.ascontiguousarray(ref, dtype=np.float32)))
    y = _logits(model)
    ref = _logits(Model.load(path, exact=True))
    scale = ref.abs().max().item()
    # bf16 products (the coarse types, where the CPU multiplies bf16) round activations and
    # weights to 8 bits of mantissa: on this random model that moves logits by a few percent.
    # Elsewhere the block types' products of 1-4 and 16+ rows round the activations to int16
    # (1/65278 of each block's largest value), at every ISA level: up to 1e-3 of the largest
    # logit here, and 2.6e-3 for Q4_1, whose unsigned nibbles make the rounded integer part
    # one of two large terms that its minimum's part cancels (measured with LLAMAPY_CPU_ISA=avx2
    # and =scalar alike); the float types multiply in fp32; with AVX512-VNNI the K-quants' 120-row
    # prompt takes int8 activations (kernels/c/q8mm_x86.c: 1/254 of a block's largest value;
    # Q6_K measured 2.5e-2 here, Q4_K and Q5_K under 5e-3), and so do Q4_0, Q5_0, Q8_0
    # (q8mm32_x86.c), whose flat random logits then swap near-ties (Q4_0: 3 of 11 top-1); at the
    # AVX2 level without VNNI Q4_0 / Q4_1 / Q5_0 / Q5_1 read int8 (ggml's Q8_0 / Q8_1, as llama.cpp
    # does) in the int8 lanes (lanes8_x86.c: 5-8 and 16+ rows; Q4_1 here up to 8.2e-2 of the largest
    # logit on an AMD Zen 3)
    bf16 = dense_dtype(qtype, L.wo.lib) == torch.bfloat16
    i8 = bool(L.wo.lib.fn.lp_lanes8_takes(int(qtype), 256, 16))  # AVX2 without VNNI: int8 (Q8_0 / Q8_1) lanes
    q8 = L.wo.lib.fn.lp_q8mm_covers(int(qtype), 256, 120) or i8
    tol = 1e-1 if i8 else 6e-2 if bf16 or q8 else 2e-3 if qtype in (T.F16, T.BF16, T.F32) else 5e-3
    err = (y - ref).abs().max().item()
    assert err <= tol * scale
    same = y.argmax(-1) == ref.argmax(-1)
    if q8:  # (int8 products: a different top-1 only where the reference's top two are within the error)
        top2 = ref.topk(2, dim=-1).values  # [n, 2]
        assert (same | (top2[:, 0] - top2[:, 1] <= 2 * err)).all()
    else:
        assert same.float().mean().item() >= 0.8
