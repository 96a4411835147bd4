"""A multi-row ubatch's MoE FFN in one C call (kernels/c/moe_rows.c, MoeRow.add_rows) against
model/moe.py's per-expert loop on the same tiny models: rows routed to different experts in one
ubatch, k > 1, the same output within the products' rounding; and a prefill gives the same logits
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


@pytest.mark.parametrize("arch,n_expert,k,wt", [("qwen3moe", 16, 4, T.Q8_0), ("llama", 4, 2, T.F16),
                                                ("qwen3moe", 8, 2, T.IQ4_NL)])
@pytest.mark.parametrize("n_tokens", [2, 7, 40])
def test_c_rows_equal_the_per_expert_loop(tmp_path, arch, n_expert, k, wt, n_tokens):
    m = Model.load(write_tiny_family(tmp_path / "m.gguf", arch, wt, n_expert=n_expert, n_expert_used=k))
    hp = m.hparams
    g = torch.Generator().manual_seed(n_tokens)
    for L in m.net.layers:
        moe = L.moe
        row = moe_row_for(moe)
        assert row is not None, "the C path applies to this model"
        for _ in range(3):
            x = rms_norm(torch.randn(n_tokens, hp.n_embd, generator=g) * 2, L.ffn_norm, hp.f_norm_rms_eps)
            y0 = torch.randn(n_tokens, hp.n_embd, generator=g)
            _, sel = moe.route(x)
            assert len(set(sel.reshape(-1).tolist())) > 1, "the rows pick different experts"
            moe.row_c = row
            y_c = moe.add_into(x, y0.clone())
            moe.row_c = None  # the per-expert loop
            y_py = moe.add_into(x, y0.clone())
            torch.testing.assert_close(y_c, y_py, rtol=1e-5, atol=1e-5)


def _prefill_logits(path, monkeypatch, c_on: bool) -> torch.Tensor:
    monkeypatch.setenv("LLAMAPY_MOE_C", "1" if c_on else "0")
    m = Model.load(path)
    ctx = Context(m, ContextParams(n_ctx=64))
    b = Batch()
    toks = [5, 17, 101, 33, 250, 9, 77, 140, 3, 60]
    for pos, tok in enumerate(toks):
        b.add(tok, pos, [0], logits=True)
    ctx.decode(b)
    assert all((L.moe.row_c is not None) == c_on for L in m.net.layers)
    return torch.stack([ctx.get_logits_ith(i).clone() for i in range(len(toks))])


def test_prefill_with_and_without_the_c_rows(tmp_path, monkeypatch):
    path = write_tiny_family(tmp_path / "m.gguf", "qwen3moe", T.Q8_0, n_expert=16, n_expert_used=4)
    on, off = _prefill_logits(path, monkeypatch, True), _prefill_logits(path, monkeypatch, False)
    torch.testing.assert_close(on, off, rtol=1e-4, atol=1e-4)
    assert torch.equal(on.argmax(-1), off.argmax(-1))
