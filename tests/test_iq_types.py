"""The 4-bit types published files use beyond the legacy and K-quants (issue "Model families",
part 3): IQ4_NL, IQ4_XS and MXFP4 load and run, the other i-quants and ternary types are refused.

With the CPU kernels the three stay in their file's blocks (kernels/c/quants_iq.c reads them into
the kernels' canonical rows; tests/test_block_types.py and test_kernels.py check their products);
without them (LLAMAPY_KERNELS=0, no C compiler) the loader takes model/qmatrix.py's fallback:
each matrix dequantized once at load to float32, 4 bytes a weight, what memory/process.py's
resident_weight_bytes and so `llamapy mem` count. A tiny llama of each type (hand-packed IQ4_NL /
IQ4_XS blocks, gguf's MXFP4 quantizer) then gives the logits of the same file loaded with
exact=True (every weight float32).
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
from llamapy.kernels import load_kernels
from llamapy.model.block_matrix import BlockMatrix
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


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "no-kernels"])
@pytest.mark.parametrize("qtype", RUN_TYPES, ids=lambda t: t.name)
def test_model_runs(tmp_path, monkeypatch, qtype, kernels):
    if kernels:
        if load_kernels() is None:
            pytest.skip("no C compiler: the CPU kernels are off")
        _check_model(_tiny(tmp_path, qtype), qtype, kernels)
        return
    monkeypatch.setenv("LLAMAPY_KERNELS", "0")
    load_kernels.cache_clear()
    try:
        _check_model(_tiny(tmp_path, qtype), qtype, kernels)
    finally:
        monkeypatch.delenv("LLAMAPY_KERNELS")
        load_kernels.cache_clear()


def _check_model(path, qtype: T, kernels: bool) -> None:
    model = Model.load(path)
    L = model.net.layers[0]
    for m in (L.wqkv, L.wo, L.ffn_gate_up, L.ffn_down):
        for p in m.parts if isinstance(m, StackedMatrix) else [m]:
            if kernels:
                assert isinstance(p, BlockMatrix) and p.qtype == qtype, type(p)
            else:
                assert isinstance(p, QMatrix) and p.kind == "dense" and p.dense.dtype == torch.float32, type(p)
    header = GGUFHeader(path)
    assert model.n_bytes_resident == resident_weight_bytes(header.tensors, blocks=kernels)
    matrices = [t for t in header.tensors.values() if len(t.ne) == 2]
    if kernels:  # the file's bytes
        assert model.n_bytes_resident < sum(4 * t.shape[0] * t.shape[1] for t in matrices) / 6
    else:  # 4.25-4.5 bits a weight in the file, 4 bytes a weight loaded
        assert model.n_bytes_resident >= sum(4 * t.shape[0] * t.shape[1] for t in matrices)
    reader = gguf.GGUFReader(str(path))
    down = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    ref = gguf.quants.dequantize(np.asarray(down.data), down.tensor_type).reshape(L.ffn_down.n_out, -1)
    assert torch.equal(L.ffn_down.dequant(), torch.from_numpy(np.ascontiguousarray(ref, dtype=np.float32)))
    y = _logits(model)
    ref = _logits(Model.load(path, exact=True))
    assert torch.equal(y.argmax(-1), ref.argmax(-1))
    # the kernels' integer products round activations to int16 (tests/test_block_types.py)
    assert (y - ref).abs().max().item() <= (5e-3 if kernels else 1e-4) * ref.abs().max().item()


@pytest.mark.parametrize("qtype", REFUSED_TYPES, ids=lambda t: t.name)
def test_other_types_refused_by_name(tmp_path, monkeypatch, qtype):
    monkeypatch.setitem(tiny_model.K_PACK, qtype, ((), 1))  # random bytes: refused before they are read
    path = _tiny(tmp_path, qtype)
    with pytest.raises(Exception) as e:
        Model.load(path)
    msg = str(e.value)
    assert f"has ggml type {qtype.name}, which llamapy cannot read" in msg and "tensor '" in msg, msg
