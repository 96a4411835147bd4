"""The same engine on CUDA (skipped, with the reason shown, on machines without a GPU)."""
from __future__ import annotations

import random

import pytest
import torch

import llamapy
from llamapy import Batch, Context, ContextParams

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _logits(model, toks, **kw):
    ctx = Context(model, ContextParams(n_ctx=512, **kw))
    b = Batch()
    for i, t in enumerate(toks):
        b.add(t, i, [0], logits=True)
    ctx.decode(b)
    return ctx.get_logits().clone()


@cuda
def test_tiny_cuda_equals_cpu(tiny_path):
    toks = random.Random(0).choices(range(200), k=40)
    cpu = _logits(llamapy.Model.load(tiny_path, device="cpu", exact=True), toks, type_k="f32", type_v="f32")
    gpu_model = llamapy.Model.load(tiny_path, device="cuda")
    assert gpu_model.device.type == "cuda"
    gpu = _logits(gpu_model, toks, type_k="f32", type_v="f32")
    torch.testing.assert_close(gpu, cpu, atol=1e-3, rtol=1e-3)


@cuda
def test_smollm2_cuda_paris_and_mixed_sequences(smollm2_path):
    model = llamapy.Model.load(smollm2_path, device="cuda")
    ids = model.tokenize("The capital of France is")
    ctx = Context(model, ContextParams(n_ctx=1024, n_seq_max=2, kv_unified=True))
    b = Batch()
    for i, t in enumerate(ids):
        b.add(t, i, [0], logits=i == len(ids) - 1)
        b.add(t, i, [1], logits=False)
    ctx.decode(b)
    out = []
    pos = len(ids)
    for _ in range(4):
        t = int(ctx.get_logits_ith(-1).argmax())
        out.append(t)
        b = Batch()
        b.add(t, pos, [0], logits=True)
        ctx.decode(b)
        pos += 1
    assert "Paris" in model.detokenize(out)


def test_nkvo_on_cpu_changes_nothing(tiny_path):
    """Without a GPU the cache is in host memory anyway: -nkvo gives the same logits."""
    model = llamapy.Model.load(tiny_path, device="cpu")
    toks = random.Random(1).choices(range(200), k=24)
    a = _logits(model, toks)
    ctx = Context(model, ContextParams(n_ctx=512, offload_kqv=False))
    assert ctx.cparams.offload_kqv and ctx.memory.k[0].device.type == "cpu"
    torch.testing.assert_close(_logits(model, toks, offload_kqv=False), a, atol=0, rtol=0)


@cuda
def test_nkvo_keeps_the_cache_in_host_memory(tiny_path):
    """-nkvo under a CUDA model: the cache and masks in host memory, attention there, the
    same logits as the offloaded cache."""
    model = llamapy.Model.load(tiny_path, device="cuda")
    toks = random.Random(2).choices(range(200), k=40)
    ctx = Context(model, ContextParams(n_ctx=512, offload_kqv=False))
    assert not ctx.cparams.offload_kqv and ctx.memory.k[0].device.type == "cpu"
    on = _logits(model, toks)
    off = _logits(model, toks, offload_kqv=False)
    assert off.device.type == "cpu"
    torch.testing.assert_close(off, on, atol=1e-3, rtol=1e-3)
