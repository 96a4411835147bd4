"""gpt-oss (llama.cpp LLM_ARCH_OPENAI_MOE, model/archs/gptoss.py) beyond test_families.py's
logits against llama.cpp: each part of the architecture moves the tiny file's logits far from
llama.cpp's when it is planted wrong (so the reference checks it), the sinks on every attention
path (flash or not, one mask or gathered cells; flash on the CPU through PyTorch's flash
kernel and its log-sum-exp, and few rows through the C attention), YaRN against ggml's rope_yarn formula, the
MoE's gating and biases, the keys and tensors it reads or refuses, and `llamapy mem`."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from llamapy import Model
from llamapy.bench.kld import BaseFile, KldStats
from llamapy.bench.perplexity import make_context, perplexity
from llamapy.gguf.header import GGUFError, GGUFHeader
from llamapy.model.hparams import hparams_from_gguf
from test_families import _mem_json, _write
from tiny_family import F16, write_tiny_family

REF = Path(__file__).parent / "data" / "ref_logits"
F32 = gguf.GGMLQuantizationType.F32


def _kld(model: Model, case: str, n_batch: int = 64, n_ubatch: int = 64, fa: str = "auto") -> KldStats:
    stats = KldStats()
    with BaseFile.open(REF / f"{case}.kld", model.n_vocab) as base:
        ctx = make_context(model, base.n_ctx, n_batch, n_ubatch, flash_attn=fa)
        perplexity(ctx, base.tokens, base.n_ctx, on_logits=lambda lg, tg: stats.add(lg, base.next_chunk(), tg))
    return stats


def _load(tmp_path: Path, case: str = "gpt-oss-f32") -> Model:
    return Model.load(_write(tmp_path, json.loads((REF / f"{case}.json").read_text())["writer"]))


def _plant(model: Model, defect: str, monkeypatch) -> None:
    import llamapy.model.moe as moe

    net, real = model.net, moe.swiglu_oai
    for L in net.layers:
        m = L.moe
        if defect == "no sinks":
            L.sinks = None
        elif defect == "no router bias":
            m.gate_inp_b = None
        elif defect == "softmax gating, not renormalised":
            m.softmax_weight, m.norm_w = False, False
        elif defect == "no expert biases":
            m.gate_b = m.down_b = None
        elif defect == "silu experts":
            m.oai = False
    if defect in ("no yarn", "yarn without its scale", "yarn without its ramp"):
        for attr in ("rope_global", "rope_swa"):
            r = getattr(net, attr)
            r = {"no yarn": lambda: dataclasses.replace(r, ext_factor=0.0, freq_scale=1.0),
                 "yarn without its scale": lambda: dataclasses.replace(r, attn_factor=1.0 / r.mscale),
                 "yarn without its ramp": lambda: dataclasses.replace(r, ext_factor=0.0, attn_factor=r.mscale)}[defect]()
            setattr(net, attr, r)
    if defect == "no sliding window":
        monkeypatch.setattr(type(model.hparams), "is_swa", lambda self, il: False)
    if defect == "swiglu_oai without the clamp":
        monkeypatch.setattr(moe, "swiglu_oai", lambda g, u: real(g, u, limit=1e9))
    if defect == "swiglu_oai without the +1":
        monkeypatch.setattr(moe, "swiglu_oai", lambda g, u: real(g, u.sub_(1.0)))


@pytest.mark.parametrize("defect", ["no sinks", "no router bias", "softmax gating, not renormalised", "no expert biases",
                                    "silu experts", "no yarn", "yarn without its scale", "yarn without its ramp",
                                    "no sliding window", "swiglu_oai without the clamp", "swiglu_oai without the +1"])
def test_planted_defects_are_caught(tmp_path, monkeypatch, defect):
    """The reference file is sensitive to every part: each defect, planted in the loaded model,
    takes the F32 file's logits from llama.cpp's (KLD 2e-7 as loaded) to a KLD above 0.05
    (measured 0.66 to 8.2)."""
    model = _load(tmp_path)
    _plant(model, defect, monkeypatch)
    stats = _kld(model, "gpt-oss-f32")
    print(f"{defect}: KLD {stats.mean_kld:.4f}, same top {stats.same_top:.3f}")
    assert stats.mean_kld > 0.05


@pytest.mark.parametrize("n_batch,n_ubatch,fa", [(256, 8, "on"), (256, 256, "off"), (64, 64, "off")])
def test_sequences_and_fa_off(tmp_path, n_batch, n_ubatch, fa):
    """The 4 chunks as 4 sequences of one batch (the window and the streams' cells together:
    gathered cells with the sinks) and flash attention off: llama.cpp's logits as closely as
    one sequence at a time."""
    stats = _kld(_load(tmp_path), "gpt-oss-f32", n_batch, n_ubatch, fa)
    assert stats.count == 124 and stats.mean_kld <= 1e-4 and stats.same_top == 1.0


def test_sinks_attention():
    """softmax with a sink logit per head (ggml_soft_max_add_sinks: not scaled, after the mask,
    its own value dropped), flash or not, one mask or gathered cells."""
    from llamapy.model.layers import attention, attention_gathered

    g = torch.Generator().manual_seed(0)
    n, n_kv, n_head, n_head_kv, d, scale = 3, 5, 4, 2, 8, 0.5
    q, k, v = (torch.randn(m, h, d, generator=g) * 2 for m, h in ((n, n_head), (n_kv, n_head_kv), (n_kv, n_head_kv)))
    sinks = torch.tensor([0.5, 3.0, -1.0, 8.0])
    mask = torch.zeros(n, n_kv)
    mask[0, 2:] = float("-inf")
    kr, vr = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    kq = torch.einsum("thd,khd->htk", q, kr) * scale + mask  # [n_head, n, n_kv]
    e = (kq - kq.amax(-1, keepdim=True)).exp()
    m = kq.amax(-1, keepdim=True)
    p = e / (e.sum(-1, keepdim=True) + (sinks[:, None, None] - m).exp())
    want = torch.einsum("htk,khd->thd", p, vr).reshape(n, -1)
    for flash in (True, False):
        torch.testing.assert_close(attention(q, k, v, mask, scale, flash, sinks=sinks), want)
        got = attention_gathered(q, k.reshape(n_kv, -1), v.reshape(n_kv, -1), mask[None], torch.arange(n), n_head_kv,
                                 scale, flash, sinks=sinks)
        torch.testing.assert_close(got, want)
    assert not torch.allclose(attention(q, k, v, mask, scale), want)


@pytest.mark.parametrize("cache", ["f16", "q8_0"])
@pytest.mark.parametrize("n,n_kv", [(3, 40), (1, 3000)])
def test_sinks_c_kernel(cache, n, n_kv):
    """The few-row C attention with sinks (kernels/c/attn.c: one chunk scaled by attn_sink_scale,
    several merged by attn_merge with the sink in the sum; a block cache widened 256 cells at a
    time) against the materialized softmax with sinks over the same cache values: within float
    rounding; a row that sees nothing gets zeros, a sink above every score takes most of the
    weight."""
    from llamapy.kernels import ops as kops
    from llamapy.kernels.types import C_KV_TYPES
    from llamapy.model.layers import attention

    lib = kops.load_kernels()
    if lib is None:
        pytest.skip("no C kernels on this machine (no compiler or ISA level)")
    g = torch.Generator().manual_seed(1)
    n_head, n_head_kv, d, scale = 8, 2, 64, 0.125
    q = torch.randn(n, n_head, d, generator=g)
    k, v = (torch.randn(n_kv, n_head_kv * d, generator=g) for _ in range(2))
    sinks = torch.tensor([0.5, 3.0, -1.0, 8.0, 0.0, -20.0, 2.0, 40.0])  # head 7's sink above every score
    mask = torch.zeros(n, n_kv)
    mask[0, n_kv // 2:] = float("-inf")
    if n > 1:
        mask[1] = float("-inf")  # sees nothing
    t = C_KV_TYPES[cache]
    if cache == "f16":
        kc, vc = k.half(), v.half()
        kf, vf = kc.float(), vc.float()
    else:
        kc, vc = kops.kv_quantize(lib, k, t), kops.kv_quantize(lib, v, t)
        deq = lambda b: torch.from_numpy(gguf.quants.dequantize(b.numpy(), gguf.GGMLQuantizationType.Q8_0))  # noqa: E731
        kf, vf = deq(kc).reshape(n_kv, -1), deq(vc).reshape(n_kv, -1)
    got = kops.attn_kv(lib, q, kc, vc, (t, t), n_kv, n_head_kv, d, mask, scale, sinks=sinks)
    want = attention(q, kf.view(n_kv, n_head_kv, d), vf.view(n_kv, n_head_kv, d), mask, scale, False, sinks=sinks)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    if n > 1:
        assert torch.all(got[1] == 0)
    o7 = got.view(n, n_head, d)[0, 7]
    assert o7.abs().max() < 1e-6 * vf.abs().max()  # exp(40 - ~5) dwarfs the cells
    plain = kops.attn_kv(lib, q, kc, vc, (t, t), n_kv, n_head_kv, d, mask, scale)
    assert not torch.allclose(plain, want, atol=1e-3)


def _ggml_rope_yarn(pos: int, n_dims: int, base: float, freq_scale: float, n_ctx_orig: int, ext_factor: float,
                    attn_factor: float, beta_fast: float = 32.0, beta_slow: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """ggml-cpu's ggml_rope_cache_init / rope_yarn for one position, in float32 as there."""
    f = np.float32

    def corr(beta: float) -> np.float32:
        return f(n_dims) * f(math.log(n_ctx_orig / (beta * 2 * math.pi))) / (f(2) * f(math.log(base)))

    lo, hi = max(0.0, math.floor(corr(beta_fast))), min(n_dims - 1.0, math.ceil(corr(beta_slow)))
    theta_scale, theta = f(base) ** f(-2.0 / n_dims), f(pos)
    cos, sin = [], []
    for i0 in range(0, n_dims, 2):
        interp = f(freq_scale) * theta
        t, m = interp, f(attn_factor)
        if ext_factor:
            y = (i0 // 2 - lo) / max(0.001, hi - lo)
            mix = f((1 - min(1.0, max(0.0, y))) * ext_factor)
            t = interp * (1 - mix) + theta * mix
            m *= f(1.0 + 0.1 * math.log(1.0 / freq_scale))
        cos.append(math.cos(t) * m)
        sin.append(math.sin(t) * m)
        theta = f(theta * theta_scale)
    return np.array(cos, dtype=np.float32), np.array(sin, dtype=np.float32)


def test_hparams_and_yarn(tmp_path):
    """llama_model_openai_moe::load_arch_hparams and llama_context's YaRN values: the window on
    the even layers, ext_factor 1 for rope.scaling.type yarn, attn_factor 1 (get_mscale(8) /
    (1 + 0.1 ln 8)), n_ctx_orig from original_context_length; cos and sin as ggml's rope_yarn."""
    m = Model.load(write_tiny_family(tmp_path / "g.gguf", "gpt-oss", F16, n_layer=3))
    hp, net = m.hparams, m.net
    assert type(net).__name__ == "GptOssModel" and net.fused is None and hp.attn_sinks and not hp.attn_plain
    assert hp.n_swa == 16 and hp.swa_layers == (True, False, True) and net.rope_swa == net.rope_global
    assert (hp.yarn_ext_factor, hp.yarn_attn_factor, hp.n_ctx_orig_yarn, hp.rope_freq_scale) == (1.0, 1.0, 512, 0.125)
    assert (hp.n_expert, hp.n_expert_used, hp.n_ff_exp) == (4, 2, 64) and net.f_attention_scale == 1 / 32**0.5
    r = net.rope_global
    assert r.corr_dims() == (1.0, 8.0) and abs(r.mscale - (1 + 0.1 * math.log(8))) < 1e-12
    from llamapy.model.rope import rope_cos_sin

    pos = torch.tensor([0, 1, 17, 63, 500])
    cos, sin = rope_cos_sin(pos, r)
    for i, p in enumerate(pos.tolist()):
        c, s = _ggml_rope_yarn(p, 32, 10000.0, 0.125, 512, 1.0, 1.0)
        np.testing.assert_allclose(cos[i, 0].numpy(), c, atol=2e-6 * max(1, p))
        np.testing.assert_allclose(sin[i, 0].numpy(), s, atol=2e-6 * max(1, p))
    plain = write_tiny_family(tmp_path / "p.gguf", "gpt-oss", F16, extra_keys={"rope.scaling.type": None,
                                                                            "rope.scaling.factor": None})
    hq = hparams_from_gguf(GGUFHeader(plain))
    assert (hq.yarn_ext_factor, hq.rope_freq_scale) == (0.0, 1.0)


def test_moe_gating_and_biases(tmp_path):
    """build_moe_ffn for gpt-oss, row by row: logits + router bias, the top 2 of the logits
    softmaxed over the 2, each expert's gate/up/down products plus their biases, swiglu_oai;
    the grouped products equal it, and the rows of a ubatch go to different experts."""
    from llamapy.model.layers import rms_norm

    m = Model.load(write_tiny_family(tmp_path / "m.gguf", "gpt-oss", F16, seed=2))
    hp, L = m.hparams, m.net.layers[0]
    moe = L.moe
    x = rms_norm(torch.randn(64, hp.n_embd, generator=torch.Generator().manual_seed(0)), L.post_norm, hp.f_norm_rms_eps)
    w, sel = moe.route(x)
    logits = moe.gate_inp(x).float() + moe.gate_inp_b
    top = logits.topk(2, dim=-1)
    torch.testing.assert_close(sel, top.indices)
    torch.testing.assert_close(w, top.values.softmax(-1))
    assert len(set(sel[:, 0].tolist())) >= 3
    want = torch.zeros(64, hp.n_embd)
    for i in range(64):
        for j in range(2):
            e = int(sel[i, j])
            g = (moe.gate[e](x[i : i + 1]) + moe.gate_b[e]).clamp(max=7.0)
            u = (moe.up[e](x[i : i + 1]) + moe.up_b[e]).clamp(-7.0, 7.0)
            h = g * torch.sigmoid(1.702 * g) * (u + 1)
            want[i] += w[i, j] * (moe.down[e](h)[0] + moe.down_b[e])
    torch.testing.assert_close(moe.add_into(x, torch.zeros(64, hp.n_embd)), want, rtol=1e-4, atol=1e-5)


def test_keys_and_tensors(tmp_path):
    """YaRN is read for gpt-oss and still refused for the llama family; LongRoPE is refused for
    gpt-oss; the sliding window, the expert width and the output matrix are required; a
    tensor it does not read is refused by name."""
    with pytest.raises(GGUFError, match="'gpt-oss.rope.scaling.type' .* none, linear and yarn"):
        hparams_from_gguf(GGUFHeader(write_tiny_family(tmp_path / "l.gguf", "gpt-oss", F16,
                                                       extra_keys={"rope.scaling.type": "longrope"})))
    with pytest.raises(GGUFError, match="'qwen3moe.rope.scaling.type'"):
        hparams_from_gguf(GGUFHeader(write_tiny_family(tmp_path / "q.gguf", "qwen3moe", F16,
                                                       extra_keys={"rope.scaling.type": "yarn"})))
    with pytest.raises(GGUFError, match="gpt-oss.attention.sliding_window is missing"):
        hparams_from_gguf(GGUFHeader(write_tiny_family(tmp_path / "w.gguf", "gpt-oss", F16,
                                                       extra_keys={"attention.sliding_window": None})))
    with pytest.raises(GGUFError, match="'gpt-oss' architecture does not read 1 .* 'blk.1.ffn_norm.weight'"):
        hparams_from_gguf(GGUFHeader(write_tiny_family(tmp_path / "x.gguf", "gpt-oss", F16,
                                                       extra_tensors=("blk.1.ffn_norm.weight",))))


def test_mem_counts_every_tensor(tmp_path):
    """`llamapy mem` predicts the loaded model's weights byte for byte (F16 matrices, MXFP4
    experts in their blocks, F32 router, biases, sinks and norms), the iSWA pair of caches, and
    the attention the sinks take: the few-row C kernel's visible cells for decode rows, SDPA's
    tiles with flash attention on (never the C tiles' workspaces), the materialized KQ with it off."""
    from llamapy.memory.estimate import estimate_memory
    from llamapy.params import ContextParams

    for wt in (F16, gguf.GGMLQuantizationType.MXFP4):
        path = write_tiny_family(tmp_path / f"{wt.name}.gguf", "gpt-oss", wt, seed=2)
        n_embd, n_layer, n_head, n_head_kv, d, n_exp, n_ff, n_vocab = 64, 2, 4, 2, 32, 4, 64, 264
        f16 = 2 * n_vocab * n_embd + n_layer * (n_embd * (n_head + 2 * n_head_kv) * d + n_head * d * n_embd)
        experts = n_layer * 3 * n_exp * n_embd * n_ff
        f32 = n_embd + n_layer * (3 * n_embd + (n_head + 2 * n_head_kv) * d + n_head + n_exp * n_embd + n_exp
                                  + n_exp * (2 * n_ff + n_embd))
        file_bytes = 2 * f16 + 4 * f32 + (2 * experts if wt == F16 else experts // 32 * 17)
        d_mem = _mem_json(path)
        model = Model.load(path)
        assert d_mem["weights_file"] == model.n_bytes_file == file_bytes
        assert d_mem["buffers"]["model"] == d_mem["process"]["weights"] == model.n_bytes_resident
        assert d_mem["hparams"]["n_swa"] == 16
    for fa, n_ubatch, kq in (("on", 256, []), ("on", 1, []), ("off", 256, ["kq (no flash attn)"])):
        est = estimate_memory(path, ContextParams(n_ctx=256, n_ubatch=n_ubatch, flash_attn=fa))
        names = [t.name for t in est.compute_terms]
        assert [n for n in names if n.startswith("kq (")] == kq and [c.name for c in est.caches] == ["non-SWA", "SWA"]
        # the sinks: the few-row C kernel's visible cells (decode rows, flash attention on), never the
        # C tiles' workspaces; SDPA's tiles with flash attention on
        assert any(n.startswith("kq visible cells") for n in names) == (fa == "on" and n_ubatch == 1), names
        assert not any(n.startswith("flash attn tiles (kernel") for n in names)
        assert ("flash attn tiles" in names) == (fa == "on")


def test_server_completion(tmp_path):
    """One greedy /completion per prompt through the server's scheduler, alone and then two at
    once (their rows in shared ubatches), 24 tokens past a 16-cell window: the same tokens, and
    each the argmax of a fresh context's one-shot prefill of the prompt and the tokens before it
    (the path test_families checks against llama.cpp)."""
    from concurrent.futures import ThreadPoolExecutor

    from llamapy import Context, ContextParams
    from llamapy.batch import Batch
    from server_harness import asgi_call, serving_state

    model = _load(tmp_path)
    prompts = ["The quick brown fox", "in the beginning there was"]
    body = {"n_predict": 24, "temperature": 0, "n_probs": 1, "ignore_eos": True}
    with serving_state(model, n_ctx=512, np_=2, n_batch=64) as st:
        def run(p: str) -> dict:
            r = asgi_call(st, "POST", "/completion", json={"prompt": p, **body})
            assert r.status_code == 200, r.text
            return r.json()

        solo = [run(p) for p in prompts]
        with ThreadPoolExecutor(2) as ex:
            both = list(ex.map(run, prompts))
    for p, s, b in zip(prompts, solo, both):
        ids = [e["id"] for e in s["completion_probabilities"]]
        assert len(ids) == 24 and [e["id"] for e in b["completion_probabilities"]] == ids
        prompt = model.tokenize(p, add_special=True, parse_special=True)
        ctx = Context(model, ContextParams(n_ctx=256, n_batch=64, n_ubatch=64))
        seq = prompt + ids
        batch = Batch()
        for i, t in enumerate(seq):
            batch.add(t, i, (0,), logits=True)
        ctx.decode(batch)
        argmax = [int(ctx.get_logits_ith(i).argmax()) for i in range(len(prompt) - 1, len(seq) - 1)]
        assert argmax == ids, (p, argmax, ids)
