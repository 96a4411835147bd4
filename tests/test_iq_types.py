"""The 4-bit types published files use beyond the legacy and K-quants (issue "Model families",
part 3): IQ4_NL, IQ4_XS and MXFP4 load and run, the other i-quants and ternary types are refused.

The kernels have no blocks of these types (kernels/types.py BLOCK_TYPES), so the loader takes
model/qmatrix.py's fallback: each matrix is dequantized once at load to float32 (4 bytes per
weight, what memory/process.py's resident_weight_bytes and so `llamapy mem` count). A tiny
llama of each type (hand-packed IQ4_NL / IQ4_XS blocks, gguf's MXFP4 quantizer) then gives the
logits of the same file loaded with exact=True (every weight float32): the same arithmetic.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

import tiny_model
from llamapy import Batch, Context, ContextParams, Model
from llamapy.gguf.header import GGUFHeader
from llamapy.memory.process import resident_weight_bytes
from llamapy.model.qmatrix import QMatrix, StackedMatrix
from tiny_model import write_tiny_llama

T = gguf.GGMLQuantizationType
RUN_TYPES = [T.IQ4_NL, T.IQ4_XS, T.MXFP4]
REFUSED_TYPES = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M, T.TQ1_0, T.TQ2_0]


def _logits(model: Model) -> torch.Tensor:
    """A 24-token prompt for 2 sequences, then 2 steps of one token each: every output's logits."""
    ctx = Context(model, ContextParams(n_ctx=256, n_seq_max=2, kv_unified=True))
    b = Batch()
    for s in range(2):
        for i in range(24):
            b.add((3 + 7 * i + 11 * s) % model.n_vocab, i, [s], logits=i == 23)
    ctx.decode(b)
    out = [ctx.get_logits().clone()]
    for p in range(24, 26):
        b = Batch()
        for s in range(2):
            b.add((5 * p + s) % model.n_vocab, p, [s], logits=True)
        ctx.decode(b)
        out.append(ctx.get_logits().clone())
    return torch.cat(out)


def _tiny(tmp_path, qtype: T):
    return write_tiny_llama(tmp_path / f"{qtype.name}.gguf", n_embd=256, n_head=4, n_head_kv=2, n_ff=512,
                            weight_type=qtype)


@pytest.mark.parametrize("qtype", RUN_TYPES, ids=lambda t: t.name)
def test_model_runs_dequantized_once(tmp_path, qtype):
    path = _tiny(tmp_path, qtype)
    model = Model.load(path)
    L = model.net.layers[0]
    for m in (L.wqkv, L.wo, L.ffn_gate_up, L.ffn_down):
        parts = m.parts if isinstance(m, StackedMatrix) else [m]
        for p in parts:
            assert isinstance(p, QMatrix) and p.kind == "dense" and p.dense.dtype == torch.float32, type(p)
    header = GGUFHeader(path)
    assert model.n_bytes_resident == resident_weight_bytes(header.tensors, blocks=True)
    # the layer matrices' file bytes (4.25-4.5 bits a weight) become 4 bytes a weight
    n_weights = sum(t.shape[0] * t.shape[1] for t in header.tensors.values() if len(t.ne) == 2)
    assert model.n_bytes_resident >= 4 * n_weights
    reader = gguf.GGUFReader(str(path))
    down = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    ref = gguf.quants.dequantize(np.asarray(down.data), down.tensor_type).reshape(L.ffn_down.n_out, -1)
    assert torch.equal(L.ffn_down.dequant(), torch.from_numpy(np.ascontiguousarray(ref, dtype=np.float32)))
    y = _logits(model)
    ref = _logits(Model.load(path, exact=True))
    assert torch.equal(y.argmax(-1), ref.argmax(-1))
    assert (y - ref).abs().max().item() <= 1e-4 * ref.abs().max().item()


@pytest.mark.parametrize("qtype", REFUSED_TYPES, ids=lambda t: t.name)
def test_other_types_refused_by_name(tmp_path, monkeypatch, qtype):
    monkeypatch.setitem(tiny_model.K_PACK, qtype, ((), 1))  # random bytes: refused before they are read
    path = _tiny(tmp_path, qtype)
    with pytest.raises(Exception) as e:
        Model.load(path)
    msg = str(e.value)
    assert f"has ggml type {qtype.name}, which llamapy cannot read" in msg and "tensor '" in msg, msg
