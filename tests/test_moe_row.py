"""One decode row's MoE FFN in one C call (kernels/c/moe.c, kernels/moe_row.py) against
model/moe.py's per-expert path on the same tiny models: the same experts chosen, the same weights,
the same output within the products' rounding; and a token-by-token decode gives the same logits
with it on and off (LLAMAPY_MOE_C=0)."""
from __future__ import annotations

import gguf
import pytest
import torch
from tiny_family import write_tiny_family

from llamapy.batch.batch import Batch
from llamapy.context import Context, ContextParams
from llamapy.kernels.moe_row import moe_row_for
from llamapy.model.layers import rms_norm
from llamapy.model.model import Model

T = gguf.GGMLQuantizationType


# The last two: each thread's share of the (expert, 16 rows) tasks and of the output rows
# (moe.c) starting inside an expert (3 experts of 6 or 5 chunks), a short last chunk (72 rows).
@pytest.mark.parametrize("arch,n_expert,k,wt,sizes", [("qwen3moe", 16, 4, T.Q8_0, {}), ("llama", 4, 2, T.F16, {}),
                                                      ("qwen3moe", 8, 2, T.IQ4_NL, {}),
                                                      ("qwen3moe", 8, 3, T.Q8_0, {"n_embd": 96, "n_ff_exp": 96}),
                                                      ("llama", 6, 3, T.F16, {"n_embd": 80, "n_ff": 72})])
def test_c_row_equals_the_per_expert_path(tmp_path, arch, n_expert, k, wt, sizes):
    m = Model.load(write_tiny_family(tmp_path / "m.gguf", arch, wt, n_expert=n_expert, n_expert_used=k, **sizes))
    hp = m.hparams
    g = torch.Generator().manual_seed(0)
    for L in m.net.layers:
        moe = L.moe
        row = moe_row_for(moe)
        assert row is not None, "the C path applies to this model"
        for i in range(12):
            x = rms_norm(torch.randn(1, hp.n_embd, generator=g) * 2, L.ffn_norm, hp.f_norm_rms_eps)
            y0 = torch.randn(1, hp.n_embd, generator=g)
            y_c, y_py = y0.clone(), y0.clone()
            sel, w = row.add_into(x, y_c)
            w_ref, sel_ref = moe.route(x)
            moe._add_one(x, y_py)
            assert torch.equal(sel, sel_ref), (i, sel, sel_ref)
            torch.testing.assert_close(w, w_ref, rtol=1e-6, atol=1e-7)
            torch.testing.assert_close(y_c, y_py, rtol=1e-5, atol=1e-5)


def _decode_logits(path, monkeypatch, c_on: bool) -> torch.Tensor:
    monkeypatch.setenv("LLAMAPY_MOE_C", "1" if c_on else "0")
    m = Model.load(path)
    ctx = Context(m, ContextParams(n_ctx=64))
    out = []
    for pos, tok in enumerate([5, 17, 101, 33, 250, 9, 77, 140]):
        b = Batch()
        b.add(tok, pos, [0], logits=True)
        ctx.decode(b)
        out.append(ctx.get_logits().clone())
    assert (m.net.fused is not None and m.net.fused.calls == len(out)) == c_on  # on: every layer in one C call
    return torch.cat(out)


def test_decode_with_and_without_the_c_row(tmp_path, monkeypatch):
    path = write_tiny_family(tmp_path / "m.gguf", "qwen3moe", T.Q8_0, n_expert=16, n_expert_used=4)
    on, off = _decode_logits(path, monkeypatch, True), _decode_logits(path, monkeypatch, False)
    # within 1e-4 of the largest logit: token 2's second layer routes 0.99974 / 0.00014 / 6e-05 / 6e-05,
    # its third and fourth experts tied to the router's last digits, so the products' fp32 order (the
    # C path's norm and router against torch's) may pick another expert of weight 6e-05 (4e-4 here
    # at the AVX2 level, of logits up to 17)
    torch.testing.assert_close(on, off, rtol=1e-4, atol=1e-4 * off.abs().max().item())
    assert torch.equal(on.argmax(-1), off.argmax(-1))
