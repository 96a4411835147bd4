"""Logits against an independent reference: transformers loads the same GGUF, dequantizes
it with the gguf package and runs its own Llama implementation.  Teacher-forced over >= 1000
tokens of real prose, decoded by llamapy in 512-row ubatches through the KV cache."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import llamapy

DATA = Path(__file__).parent / "data"
# Logits are O(10).  exact mode (fp32 weights and activations): differences come from op order
# only.  Packed mode at 16-row ubatches runs PyTorch's int4 kernel, which rounds its outputs
# to bf16 (relative 2^-9 per matmul, 120 matmuls deep), as llama.cpp's Q4 kernels round their
# activations to 8 bits: the argmax flips at near-ties only.  Measured: exact 100% / 0.026,
# packed 98.9% / < 1.5 on prose_en.txt; big ubatches (>= 32 rows) take the exact path.
MAX_ABS = {True: 0.1, False: 1.5}
MIN_TOP1 = {True: 0.99, False: 0.98}


@pytest.fixture(scope="module")
def reference(smollm2, smollm2_path):
    transformers = pytest.importorskip("transformers")
    ids = smollm2.tokenize((DATA / "prose_en.txt").read_text(), add_special=True)[:1100]
    assert len(ids) >= 1000
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(smollm2_path.parent), gguf_file=smollm2_path.name, dtype=torch.float32
    )
    with torch.inference_mode():
        ref_logits = ref(torch.tensor([ids])).logits[0]  # [n, n_vocab]
    return ids, ref_logits


@pytest.mark.slow
@pytest.mark.parametrize("exact", [True, False], ids=["exact-f32", "packed-q4"])
def test_llama_logits_match_transformers(reference, smollm2, smollm2_path, exact):
    ids, ref_logits = reference
    model = llamapy.Model.load(smollm2_path, exact=True) if exact else smollm2
    # exact: 512-row ubatches; packed: 16-row ubatches, so the int4/int8 kernels do the work
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=2048, n_ubatch=512 if exact else 16))
    batch = llamapy.Batch()
    for i, t in enumerate(ids):
        batch.add(t, i, [0], logits=True)
    ctx.decode(batch)
    ours = ctx.get_logits()
    assert ours.shape == ref_logits.shape
    agree = (ours.argmax(-1) == ref_logits.argmax(-1)).float().mean().item()
    max_abs = (ours - ref_logits).abs().max().item()
    print(f"exact={exact}: top-1 agreement {agree:.4f} over {len(ids)} tokens, max |diff| {max_abs:.4f}")
    assert agree >= MIN_TOP1[exact]
    assert max_abs < MAX_ABS[exact]
