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
# only.  The default mode rounds activations, group scales and matmul outputs to bf16
# (relative 2^-9 per matmul, 120 matmuls deep): 16-row ubatches through PyTorch's int4
# kernel, 512-row ubatches through bf16 GEMMs; the vocabulary projection's top outputs are
# exact.  llama.cpp's own Q4_1 kernels round activations to 8 bits (Q8_1): against the same
# f32 reference its top-1 agreement is 96.0% (`llamapy perplexity --kl-divergence`, -c 128).
# Measured here: exact 99.9% / 0.028; 16 rows 98.3% / 0.76; 512 rows 97.9% / 0.80.
MAX_ABS = {"exact-f32": 0.1, "packed-16": 1.5, "packed-512": 1.5}
MIN_TOP1 = {"exact-f32": 0.99, "packed-16": 0.97, "packed-512": 0.97}


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
@pytest.mark.parametrize("mode", ["exact-f32", "packed-16", "packed-512"])
def test_llama_logits_match_transformers(reference, smollm2, smollm2_path, mode):
    ids, ref_logits = reference
    exact = mode == "exact-f32"
    model = llamapy.Model.load(smollm2_path, exact=True) if exact else smollm2
    # packed-16: the int4 kernels do the work; 512-row ubatches: dense (bf16) GEMMs
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=2048, n_ubatch=16 if mode == "packed-16" else 512))
    batch = llamapy.Batch()
    for i, t in enumerate(ids):
        batch.add(t, i, [0], logits=True)
    ctx.decode(batch)
    ours = ctx.get_logits()
    assert ours.shape == ref_logits.shape
    agree = (ours.argmax(-1) == ref_logits.argmax(-1)).float().mean().item()
    max_abs = (ours - ref_logits).abs().max().item()
    print(f"{mode}: top-1 agreement {agree:.4f} over {len(ids)} tokens, max |diff| {max_abs:.4f}")
    assert agree >= MIN_TOP1[mode]
    assert max_abs < MAX_ABS[mode]
