"""Decode through graphs (model/cuda_graphs.py).  On the CPU the runner's emulation mode
replays by running the forward on the static inputs, so these tests prove what a CUDA graph
depends on: that every input a step changes reaches the graph through the static tensors,
that keys change only with the shape (n_kv in steps of 256), and that the self-check turns
the graphs off rather than return a stale result.  The real CUDA run is the last test."""
from __future__ import annotations

import random

import pytest
import torch

import llamapy
from llamapy import Batch, Context, ContextParams
from llamapy.model.cuda_graphs import CudaGraphs
from tiny_gemma3 import write_tiny_gemma3
from tiny_model import write_tiny_llama


def _decode(model, graphs: CudaGraphs | None, n_seq: int = 1, steps: int = 40, unified: bool = True,
            n_ctx: int = 1024) -> tuple[torch.Tensor, Context]:
    """A 10-token prompt per sequence, then `steps` random tokens each, one per sequence per
    decode; every step's logits stacked."""
    ctx = Context(model, ContextParams(n_ctx=n_ctx, n_seq_max=n_seq, kv_unified=unified))
    ctx.cuda_graphs = graphs
    b = Batch()
    for s in range(n_seq):
        for i in range(10):
            b.add((3 * i + s) % model.n_vocab, i, [s], logits=i == 9)
    ctx.decode(b)
    rng, pos, out = random.Random(n_seq), [10] * n_seq, []
    for _ in range(steps):
        b = Batch()
        for s in range(n_seq):
            b.add(rng.randrange(model.n_vocab), pos[s], [s], logits=True)
            pos[s] += 1
        ctx.decode(b)
        out.append(ctx.get_logits().clone())
    return torch.cat(out), ctx


@pytest.fixture(scope="module")
def dense_tiny(tmp_path_factory):
    """The tiny llama with dense weights: the forward a CUDA model runs."""
    return llamapy.Model.load(write_tiny_llama(tmp_path_factory.mktemp("cg") / "tiny.gguf"), exact=True)


def test_single_stream_decode_replays_and_recaptures_once_per_256_cells(dense_tiny):
    ref, _ = _decode(dense_tiny, None, steps=300)
    got, ctx = _decode(dense_tiny, CudaGraphs(emulate=True), steps=300)
    g = ctx.cuda_graphs
    assert g.enabled, g.disabled_reason
    assert torch.equal(got, ref)
    # n_kv 256 for cells < 256, then 512: one warm-up + capture + check per band
    assert g.n_captures == 2 and g.n_checks == 4 and g.n_replays == 300 - 2 * 3


def test_mixed_sequences_in_one_stream(dense_tiny):
    ref, _ = _decode(dense_tiny, None, n_seq=3)
    got, ctx = _decode(dense_tiny, CudaGraphs(emulate=True), n_seq=3)
    assert ctx.cuda_graphs.enabled and ctx.cuda_graphs.n_replays == 40 - 3
    assert torch.equal(got, ref)


def test_rows_in_several_streams_run_eagerly(dense_tiny):
    ref, _ = _decode(dense_tiny, None, n_seq=2, unified=False)
    got, ctx = _decode(dense_tiny, CudaGraphs(emulate=True), n_seq=2, unified=False)
    assert ctx.cuda_graphs.n_captures == 0 and torch.equal(got, ref)


def test_iswa_model(tmp_path):
    """Gemma 3 (a sliding-window cache and a full one): both caches' cells and masks."""
    m = llamapy.Model.load(write_tiny_gemma3(tmp_path / "g3.gguf", n_swa=16), exact=True)
    ref, _ = _decode(m, None, steps=30)
    got, ctx = _decode(m, CudaGraphs(emulate=True), steps=30)
    assert ctx.cuda_graphs.enabled, ctx.cuda_graphs.disabled_reason
    assert ctx.cuda_graphs.n_replays == 30 - 3
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_a_stale_input_is_caught_and_graphs_turn_off(dense_tiny, monkeypatch):
    """A graph that missed an input (here: positions never refreshed) differs from the eager
    forward at its second check: graphs go off, and every returned logit is the eager one."""
    ref, _ = _decode(dense_tiny, None)
    fill = CudaGraphs._fill

    def stale_pos(self, e, inp, caches, where):
        keep = e.pos.clone()
        fill(self, e, inp, caches, where)
        e.pos.copy_(keep)

    monkeypatch.setattr(CudaGraphs, "_fill", stale_pos)
    got, ctx = _decode(dense_tiny, CudaGraphs(emulate=True))
    g = ctx.cuda_graphs
    assert not g.enabled and "differs from the eager forward" in g.disabled_reason
    assert g.n_replays == 0
    assert torch.equal(got, ref)


def test_a_failing_capture_falls_back(dense_tiny, monkeypatch):
    def boom(self, *a):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(CudaGraphs, "_capture", boom)
    ref, _ = _decode(dense_tiny, None, steps=5)
    got, ctx = _decode(dense_tiny, CudaGraphs(emulate=True), steps=5)
    assert not ctx.cuda_graphs.enabled and "not permitted" in ctx.cuda_graphs.disabled_reason
    assert torch.equal(got, ref)


def test_graphs_are_for_cuda_only(monkeypatch):
    assert CudaGraphs.for_device(torch.device("cpu")) is None
    monkeypatch.setenv("LLAMAPY_CUDA_GRAPHS", "0")
    assert CudaGraphs.for_device(torch.device("cuda")) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graphs_on_the_gpu(smollm2_path, monkeypatch):
    model = llamapy.Model.load(smollm2_path, device="cuda")
    got, ctx = _decode(model, CudaGraphs.for_device(model.device), steps=300)
    g = ctx.cuda_graphs
    assert g.enabled, g.disabled_reason
    assert g.n_captures == 2 and g.n_replays == 300 - 6
    ref, _ = _decode(model, None, steps=300)
    torch.testing.assert_close(got, ref, rtol=1e-3, atol=1e-3)
