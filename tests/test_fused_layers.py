"""The fused decode path (kernels/fused_layers.py: every layer in one C call) against the
per-op path of the same model and kernels: for llama the same logits, bit for bit, wherever
the fused path is taken, and the per-op path wherever it must not be; for gemma3 (sliding-
window and global layers, Q/K norms, post norms, GELU) the same logits up to the per-op
path's PyTorch norms and RoPE."""
from __future__ import annotations

import gguf
import pytest
import torch

from llamapy import Batch, Context, ContextParams, Model
from llamapy.kernels import load_kernels
from tiny_gemma3 import write_tiny_gemma3
from tiny_model import write_tiny_llama

T = gguf.GGMLQuantizationType

pytestmark = pytest.mark.skipif(load_kernels() is None, reason="no C compiler: the CPU kernels are off")


def _run(model: Model, fused: bool, params: ContextParams, n_seq: int, prompt: int = 23, steps: int = 4,
         holes: bool = False) -> tuple[torch.Tensor, int]:
    """A prompt per sequence (one batch), `steps` one-token-per-sequence decodes; with holes,
    sequence 0's tail (positions 10..) is removed and 7 new tokens decoded as one ubatch into
    the freed cells, which lie before sequence 1's.  Returns every output's logits stacked and how many forwards took the fused path."""
    net = model.net
    saved = net.fused
    if not fused:
        net.fused = None
    calls0 = saved.calls if saved is not None else 0
    try:
        ctx = Context(model, params)
        out = []
        b = Batch()
        for s in range(n_seq):
            for i in range(prompt + s):
                b.add((3 + 7 * i + 11 * s) % model.n_vocab, i, [s], logits=i == prompt + s - 1)
        ctx.decode(b)
        out.append(ctx.get_logits().clone())
        pos = [prompt + s for s in range(n_seq)]
        if holes:
            assert ctx.memory.seq_rm(0, 10, -1)
            b = Batch()
            for i in range(10, 17):
                b.add((9 * i + 1) % model.n_vocab, i, [0], logits=i == 16)
            ctx.decode(b)
            out.append(ctx.get_logits().clone())
            pos[0] = 17
        for t in range(steps):
            b = Batch()
            for s in range(n_seq):
                b.add((5 * t + 13 * s + 2) % model.n_vocab, pos[s], [s], logits=True)
                pos[s] += 1
            ctx.decode(b)
            out.append(ctx.get_logits().clone())
        return torch.cat(out), (saved.calls - calls0 if saved is not None else 0)
    finally:
        net.fused = saved


@pytest.fixture(scope="module", params=[T.Q4_0, T.Q4_1, T.Q8_0], ids=lambda t: t.name)
def block_model(request, tmp_path_factory):
    path = write_tiny_llama(tmp_path_factory.mktemp("fused") / f"{request.param.name}.gguf", weight_type=request.param)
    m = Model.load(path)
    assert m.net.fused is not None
    return m


@pytest.mark.parametrize("n_seq", [1, 3, 12])
def test_fused_layers_are_the_per_op_path(block_model, n_seq):
    """One row (int16 activations), a few (the same, through the canonical rows) and more (fp32
    products), prompt and decode ubatches."""
    p = ContextParams(n_ctx=512, n_seq_max=n_seq, kv_unified=True)
    y_op, calls_op = _run(block_model, False, p, n_seq)
    y_fused, calls = _run(block_model, True, p, n_seq)
    assert calls_op == 0
    n_prompt = sum(23 + s for s in range(n_seq))
    assert calls == 4 + (n_prompt < 32)  # the steps, and the prompt when it has fewer than 32 rows
    assert torch.equal(y_fused, y_op)


def test_fused_layers_scattered_cells(block_model):
    """A ubatch written into cells freed by seq_rm between other sequences' cells, which
    attention must then skip or read through the mask."""
    p = ContextParams(n_ctx=512, n_seq_max=2, kv_unified=True)
    y_op, _ = _run(block_model, False, p, 2, holes=True)
    y_fused, calls = _run(block_model, True, p, 2, holes=True)
    assert calls == 5  # the 7-row refill and the 4 steps (the 47-row prompt is per-op)
    assert torch.equal(y_fused, y_op)


def test_fused_layers_d64_heads(tmp_path):
    """64-wide heads, 3 query heads per KV head."""
    m = Model.load(write_tiny_llama(tmp_path / "d64.gguf", n_embd=384, n_head=6, n_head_kv=2, n_ff=256,
                                    weight_type=T.Q4_1))
    p = ContextParams(n_ctx=512, n_seq_max=4, kv_unified=True)
    for n_seq in (1, 4):
        y_op, _ = _run(m, False, p, n_seq)
        y_fused, calls = _run(m, True, p, n_seq)
        assert calls == 4 + (n_seq == 1)
        assert torch.equal(y_fused, y_op)


@pytest.mark.parametrize("n_seq", [2, 5])
def test_fused_layers_streams(block_model, n_seq):
    """One stream per sequence (kv_unified off, llama-server's -np layout): the ubatches whose
    rows lie in several streams take the fused path too, each row reading its own stream, with
    the per-op path's logits; also over cells freed by seq_rm in stream 0."""
    p = ContextParams(n_ctx=128 * n_seq, n_seq_max=n_seq, kv_unified=False)
    for holes in (False, True):
        y_op, _ = _run(block_model, False, p, n_seq, prompt=12, holes=holes)
        y_fused, calls = _run(block_model, True, p, n_seq, prompt=12, holes=holes)
        assert calls >= 4 + holes  # every step (n_seq streams each), the refill, and the prompt's ubatches
        assert torch.equal(y_fused, y_op)


@pytest.mark.parametrize("case", ["iq4_nl cache", "q8_0 cache, heads of 16", "fa off", "big ubatch"])
def test_fused_layers_fall_back(block_model, case):
    """Where the fused path does not apply, the per-op path runs (and gives its logits): a
    cache type the kernels do not store, block-typed heads that are not whole blocks of 32."""
    n_seq, prompt = 2, 5
    p = ContextParams(n_ctx=512, n_seq_max=n_seq, kv_unified=True)
    assert block_model.hparams.n_embd_head_k == 16
    if case.endswith("cache") or "heads" in case:
        t = case.split()[0]
        p = ContextParams(n_ctx=512, n_seq_max=n_seq, kv_unified=True, type_k=t, type_v=t, flash_attn="on")
    elif case == "fa off":
        p = ContextParams(n_ctx=512, n_seq_max=n_seq, kv_unified=True, flash_attn="off")
    else:
        prompt = 40  # 40 + 41 prompt rows: one ubatch of 81 rows (per-op), then 2-row steps (fused)
    y_op, _ = _run(block_model, False, p, n_seq, prompt=prompt)
    y_fused, calls = _run(block_model, True, p, n_seq, prompt=prompt)
    assert calls == {"big ubatch": 4}.get(case, 0)
    assert torch.equal(y_fused, y_op)


@pytest.mark.parametrize("types", [("q8_0", "q8_0"), ("q4_0", "q4_1"), ("q5_0", "q5_1"), ("f16", "q8_0"), ("q4_1", "f16")])
def test_fused_layers_block_caches(tmp_path, types):
    """A KV cache in ggml's blocks (-ctk / -ctv q8_0, q4_0, q4_1, q5_0, q5_1, or f16 with one of
    them): the fused path quantizes K and V in C and attends over the rows widened to f32 --
    the same cache bytes as the per-op path's store (ggml's reference quantizers) and the same
    logits, bit for bit, one stream and several."""
    m = Model.load(write_tiny_llama(tmp_path / "d64.gguf", n_embd=384, n_head=6, n_head_kv=2, n_ff=256,
                                    weight_type=T.Q4_1))
    tk, tv = types
    for n_seq, unified in ((1, True), (3, True), (3, False)):
        p = ContextParams(n_ctx=256 * n_seq, n_seq_max=n_seq, kv_unified=unified, type_k=tk, type_v=tv, flash_attn="on")
        y_op, calls_op = _run(m, False, p, n_seq, holes=n_seq == 3)
        y_fused, calls = _run(m, True, p, n_seq, holes=n_seq == 3)
        assert calls_op == 0 and calls >= 4
        assert torch.equal(y_fused, y_op)
        f16 = _run(m, False, ContextParams(n_ctx=256 * n_seq, n_seq_max=n_seq, kv_unified=unified, flash_attn="on"),
                   n_seq, holes=n_seq == 3)[0]
        assert not torch.equal(y_op, f16)  # the cache type reached the logits (the attention itself: test_kernels.py)


def test_fused_block_cache_bytes_are_the_per_op_path(tmp_path):
    """The cells a fused decode stores into a q5_1 / q4_0 cache are the per-op path's, byte for
    byte (kernels/c/kv_quant.c against the Python quantizers)."""
    m = Model.load(write_tiny_llama(tmp_path / "d64.gguf", n_embd=384, n_head=6, n_head_kv=2, n_ff=256,
                                    weight_type=T.Q8_0))
    caches = []
    for fused in (False, True):
        saved = m.net.fused
        if not fused:
            m.net.fused = None
        try:
            ctx = Context(m, ContextParams(n_ctx=256, type_k="q5_1", type_v="q4_0", flash_attn="on"))
            for i in range(20):  # one token a decode: the fused path stores every cell
                b = Batch()
                b.add((7 * i + 3) % m.n_vocab, i, [0], logits=True)
                ctx.decode(b)
            caches.append([(ctx.memory.k[il].clone(), ctx.memory.v[il].clone()) for il in range(m.hparams.n_layer)])
        finally:
            m.net.fused = saved
    assert m.net.fused.calls >= 20
    for (ka, va), (kb, vb) in zip(*caches):
        assert torch.equal(ka, kb) and torch.equal(va, vb)


def test_fused_layers_real_model(smollm2):
    """SmolLM2-135M (Q4_1 layers): one sequence and four."""
    assert smollm2.net.fused is not None
    for n_seq in (1, 4):
        p = ContextParams(n_ctx=1024, n_seq_max=n_seq, kv_unified=True)
        y_op, _ = _run(smollm2, False, p, n_seq, steps=2)
        y_fused, calls = _run(smollm2, True, p, n_seq, steps=2)
        assert calls == 2 + (n_seq == 1)
        assert torch.equal(y_fused, y_op)


@pytest.mark.parametrize("types,cache", [("f32", "f16"), ("mixed", "f16"), ("mixed", "q8_0")])
def test_fused_gemma3_layers(tmp_path, types, cache):
    """Gemma 3's shape: window and global layers (two caches, two RoPE bases), Q/K norms, post
    norms, GeGLU, separate Q/K/V of different types; against its per-op path, over more
    tokens than the window (so the window cache's mask hides cells)."""
    wt = {} if types == "f32" else {"attn_q": T.Q5_0, "attn_k": T.Q5_0, "attn_v": T.Q8_0, "attn_output": T.Q4_0,
                                    "ffn_gate": T.Q5_1, "ffn_up": T.Q4_1, "ffn_down": T.Q8_0}
    m = Model.load(write_tiny_gemma3(tmp_path / "g.gguf", n_embd=128, head_dim=64, n_ff=256, weight_types=wt))
    assert m.net.fused is not None
    for n_seq, unified in ((1, True), (3, True), (3, False)):
        p = ContextParams(n_ctx=512, n_seq_max=n_seq, kv_unified=unified, type_k=cache, type_v=cache, flash_attn="on")
        y_op, calls_op = _run(m, False, p, n_seq, prompt=20, steps=6)
        y_fused, calls = _run(m, True, p, n_seq, prompt=20, steps=6)
        assert calls_op == 0 and calls >= 6 + (n_seq == 1)
        # mixed: the per-op path's PyTorch norms differ in the last bits, which can move an
        # activation across an int16 rounding step of the one-row products (1/65534 of its block)
        tol = 1e-4 if types == "f32" else 3e-4
        torch.testing.assert_close(y_fused, y_op, rtol=1e-4, atol=tol * y_op.abs().max().item())
        assert torch.equal(y_fused.argmax(-1), y_op.argmax(-1))


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_fused_family_layers(tmp_path, arch):
    """Qwen3's shape (Q/K norms before NEOX RoPE, head size 32 apart from n_embd / n_head) and
    Llama 3's rope_freqs (frequency factors in the RoPE tables both paths share) against their
    per-op path."""
    from tiny_family import write_tiny_family

    m = Model.load(write_tiny_family(tmp_path / f"{arch}.gguf", arch, T.Q8_0, rope_freqs=arch == "llama"))
    assert m.net.fused is not None
    for n_seq in (1, 3):
        p = ContextParams(n_ctx=512, n_seq_max=n_seq, flash_attn="on")
        y_op, calls_op = _run(m, False, p, n_seq, prompt=20, steps=6)
        y_fused, calls = _run(m, True, p, n_seq, prompt=20, steps=6)
        assert calls_op == 0 and calls >= 6 + (n_seq == 1)
        torch.testing.assert_close(y_fused, y_op, rtol=1e-4, atol=3e-4 * y_op.abs().max().item())
        assert torch.equal(y_fused.argmax(-1), y_op.argmax(-1))


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_fused_k_quant_rows_are_the_per_op_path(tmp_path, qtype):
    """Q4_K / Q6_K weights (256 wide, FFN 512) and 16 sequences: a decode step's 16 rows read the Q8_K
    rows where the level has them (AVX2 5-63 rows, AVX-512 VNNI 16-127: mm.c q8k_chunk, q8kz_chunk);
    layers.c prepares them only for an input some such product reads, and every input here has one,
    so the fused steps are the per-op path's bit for bit."""
    path = write_tiny_llama(tmp_path / f"{qtype.name}.gguf", n_embd=256, n_head=4, n_head_kv=2, n_ff=512,
                            weight_type=qtype)
    m = Model.load(path)
    assert m.net.fused is not None
    p = ContextParams(n_ctx=1024, n_seq_max=16, kv_unified=True)
    y_op, _ = _run(m, False, p, 16, prompt=3, steps=2)
    y_fused, calls = _run(m, True, p, 16, prompt=3, steps=2)
    assert calls >= 2  # the steps
    assert torch.equal(y_fused, y_op)
