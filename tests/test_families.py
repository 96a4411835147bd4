"""The llama family's other members (qwen2: Q/K/V biases; qwen3: Q/K norms, a head size apart
from n_embd / n_head; llama with Llama 3's rope_freqs) and gemma2 (soft-capping, a sliding
window on the even layers) and phi3 (fused Q|K|V and gate|up) and the mixture-of-experts
models (qwen3moe, llama with Mixtral's experts: model/moe.py; gpt-oss, more in test_gptoss.py): logits against llama.cpp's own from the
same files (tests/data/ref_logits/, scripts/ref_logits_llamacpp.py), every tensor counted by
`llamapy mem`, and files with tensors or keys the architecture does not implement refused,
naming them."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from llamapy import Model
from llamapy.bench.kld import BaseFile, KldStats
from llamapy.bench.perplexity import make_context, perplexity
from llamapy.gguf.header import GGUFError, GGUFHeader
from llamapy.kernels import load_kernels
from llamapy.model.hparams import hparams_from_gguf
from tiny_family import F16, Q8_0, write_tiny_family

REF = Path(__file__).parent / "data" / "ref_logits"
CASES = sorted(p.stem for p in REF.glob("*.json"))
# (mean KLD, same top-1) bounds.  F16: llamapy's kernels against ggml's; measured KLD 1e-5 to
# 2e-5, top-1 100%.  Q8_0: ggml rounds every activation to q8_0 blocks (8 bits) before its
# products, llamapy keeps them at 16 bits or more; these random tiny models amplify that
# rounding as they amplify the weights' own (llamapy's fp32 reference of the Q8_0 file is
# 0.009 from llama.cpp's Q8_0 run and 0.012 from its F16 run): measured 0.009-0.010 and
# 93.5-95.2%.  A wrong architecture is far off: NORM for NEOX RoPE, or the biases or Q/K
# norms dropped, gives a KLD of 3-9 and top-1 below 30%.  gemma2 (F16: KLD below 1e-6, Q8_0: 3.2e-4,
# top-1 100%): without the attention soft-cap KLD 0.026, without the final one 0.15, with no
# sliding window 0.48 (top-1 93%).  phi3: F16 KLD 1.6e-5, top-1 100%; Q8_0 0.0075, 96.0%; with
# gate and up swapped KLD 3.5, top-1 22%.  phi3 LongRoPE (long factors chosen, then short ones):
# F16 KLD 2.6e-5 / 3.5e-5, top-1 100%; the other set chosen KLD 6.7, top-1 16%; without
# rope.scaling.attn_factor (1.2) KLD 0.58, top-1 55-67%.
# IQ4_NL, MXFP4 and IQ4_XS (llama; IQ4_XS at n_embd 256): ggml rounds the activations to q8_0 as
# for Q8_0; measured 0.0071, 0.0056 and 0.0098, top-1 96.0%, 96.0% and 99.2%, the same with the
# weights in their blocks (kernels/c/quants_iq.c) and dequantized to float32.
LIMITS = {"f16": (0.001, 0.99), "q8_0": (0.02, 0.90), "iq4_nl": (0.02, 0.90), "mxfp4": (0.02, 0.90),
          "iq4_xs": (0.02, 0.90)}
# MoE (qwen3moe: 8 experts, top 2; llama with 4 experts, top 2): F16 KLD 2.0e-5 / 2.9e-5, top-1
# 99.2% / 100%.  Q8_0: ggml's q8_0 activations move the router's choice where two experts are
# close, so the files' own rounding counts for more: llama.cpp's Q8_0 run is 0.099 (qwen3moe) and
# 0.029 (llama) from its F16 run, 84.7% / 89.5% top-1; llamapy's Q8_0 run is 0.023 / 0.0084
# from llama.cpp's Q8_0 run, top-1 92.7% / 93.5%.
# gpt-oss (tests/tiny_gptoss.py, 4 experts top 2): F32 KLD 2e-7, F16 3.4e-5, top-1 100%; MXFP4
# experts (activations rounded to q8_0 by ggml) 0.0022, 97.6%.
LIMITS_MOE = {"f32": LIMITS["f16"], "f16": LIMITS["f16"], "q8_0": (0.04, 0.90), "mxfp4": LIMITS["mxfp4"]}


def _write(tmp_path: Path, writer: dict) -> Path:
    kw = {**writer, "weight_type": gguf.GGMLQuantizationType[writer["weight_type"]]}
    return write_tiny_family(tmp_path / "m.gguf", **kw)


@pytest.mark.parametrize("mode,n_ubatch", [("blocks", 64), ("blocks", 8), ("exact", 64)])
@pytest.mark.parametrize("case", CASES)
def test_logits_match_llamacpp(tmp_path, monkeypatch, case, mode, n_ubatch):
    _logits_match(tmp_path, monkeypatch, case, mode, n_ubatch)


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith(("qwen3moe", "llama-moe"))])
def test_moe_decode_rows_match_llamacpp(tmp_path, monkeypatch, case):
    """The MoE models in one-row ubatches (a decode's shape): every layer, experts included, in
    one C call (layers.c with moe.c's lp_moe_row_for), against llama.cpp's log-probabilities."""
    _logits_match(tmp_path, monkeypatch, case, "blocks", 1)


def _logits_match(tmp_path, monkeypatch, case, mode, n_ubatch):
    """llama-perplexity --kl-divergence-base's log-probabilities of 4 chunks of 64 tokens (31
    scored rows each) against llamapy's perplexity run over the same tokens: with the weights
    in their blocks, a chunk in one ubatch or in ubatches of 8 rows (with the kernels: the
    fused C layers, except Qwen2's biases, Gemma 2's soft-capping and the MoE layers, whose
    ubatches route their rows to several experts), and dequantized to
    float32 (exact, the CUDA path's weights).  Gemma 2's attention goes through the
    soft-capped materialized KQ (layers.softcap_), the others' never does."""
    import llamapy.model.layers as layers

    softcaps = []
    real_softcap = layers.softcap_
    monkeypatch.setattr(layers, "softcap_", lambda kq, c: (softcaps.append(c), real_softcap(kq, c))[1])
    from llamapy.model.moe import MoeFFN

    routes = []  # MoE: each ubatch's (layer call's) selected experts [n_tokens, k]
    real_route = MoeFFN.route
    monkeypatch.setattr(MoeFFN, "route", lambda self, x: (lambda r: (routes.append(r[1]), r)[1])(real_route(self, x)))
    meta = json.loads((REF / f"{case}.json").read_text())
    path = _write(tmp_path, meta["writer"])
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha == meta["gguf_sha256"], (f"tests/tiny_family.py no longer writes the file the reference was made from "
                                        f"({case}): rerun scripts/ref_logits_llamacpp.py")
    model = Model.load(path, exact=mode == "exact")
    assert model.hparams.arch == meta["writer"]["arch"]
    moe = meta["writer"]["arch"] in ("qwen3moe", "gpt-oss") or meta["writer"].get("n_expert", 0) > 0
    stats = KldStats()
    with BaseFile.open(REF / f"{case}.kld", model.n_vocab) as base:
        assert base.n_ctx == meta["n_ctx"] and base.n_chunk == meta["n_chunks"]
        ctx = make_context(model, base.n_ctx, base.n_ctx, n_ubatch)
        perplexity(ctx, base.tokens, base.n_ctx, on_logits=lambda lg, tg: stats.add(lg, base.next_chunk(), tg))
    if n_ubatch == 8 and model.net.fused is not None and not moe:
        assert model.net.fused.calls > 0
    # experts: the C layers take one-row ubatches only (kernels/fused_layers.py), where they apply
    assert not moe or (model.hparams.n_expert > 0 and (model.net.fused is None or model.net.fused.moe))
    if moe and model.net.fused is not None:
        assert (model.net.fused.calls > 0) == (n_ubatch == 1)
    # the rows of one ubatch go to different experts (the router's first choices)
    assert not moe or n_ubatch == 1 or max(len(set(r[:, 0].tolist())) for r in routes if r.shape[0] == n_ubatch) >= 3
    gemma2 = meta["writer"]["arch"] == "gemma2"
    assert (model.net.fused is None) if gemma2 else not softcaps
    assert not gemma2 or set(softcaps) == {10.0}
    max_kld, min_top = (LIMITS_MOE if moe else LIMITS)[meta["writer"]["weight_type"].lower()]
    print(f"{case} {mode} -ub {n_ubatch}: mean KLD {stats.mean_kld:.6f}, same top {stats.same_top:.4f} over {stats.count} tokens")
    assert stats.count == meta["n_chunks"] * (meta["n_ctx"] - 1 - meta["n_ctx"] // 2)
    assert stats.mean_kld <= max_kld
    assert stats.same_top >= min_top


def _mem_json(path: Path) -> dict:
    """`llamapy mem -m path --json`, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "llamapy", "mem", "-m", str(path), "-c", "256", "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize("arch,tied", [("qwen2", False), ("qwen2", True), ("qwen3", True), ("llama", True),
                                       ("gemma2", True), ("phi3", False)])
def test_mem_counts_every_tensor(tmp_path, arch, tied):
    """The weights `llamapy mem` predicts are the loaded model's, byte for byte, and the file's
    tensors are the family's, counted from the hyperparameters: F16 matrices, F32 vectors
    (norms, Qwen2's biases, Qwen3's Q/K norms, Llama 3's rope_freqs, Gemma 2's post norms;
    Phi 3's fused attn_qkv and gate|up ffn_up hold the same elements as the separate ones).
    Gemma 2's KV cache is the iSWA pair: the window layer's cells fewer than the dense one's."""
    path = write_tiny_family(tmp_path / f"{arch}.gguf", arch, F16, tied=tied, rope_freqs=arch == "llama")
    n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab = 64, 2, 4, 2, 128, 264
    d = 32 if arch in ("qwen3", "gemma2") else n_embd // n_head
    matrices = n_vocab * n_embd * (1 if tied else 2) + n_layer * (
        n_embd * (n_head + 2 * n_head_kv) * d + n_head * d * n_embd + 3 * n_embd * n_ff)
    vectors = n_embd + n_layer * 2 * n_embd
    vectors += {"qwen2": n_layer * (n_head + 2 * n_head_kv) * d, "qwen3": n_layer * 2 * d, "llama": d // 2,
                "gemma2": n_layer * 2 * n_embd, "phi3": 0}[arch]
    file_bytes = 2 * matrices + 4 * vectors
    d_mem = _mem_json(path)
    assert d_mem["hparams"]["arch"] == arch and d_mem["hparams"]["n_embd_head_k"] == d
    assert d_mem["weights_file"] == file_bytes
    model = Model.load(path)
    assert model.n_bytes_file == file_bytes
    assert d_mem["buffers"]["model"] == model.n_bytes_resident
    assert d_mem["process"]["weights"] == model.n_bytes_resident
    assert d_mem["hparams"]["n_swa"] == (16 if arch == "gemma2" else 0)


def test_family_layers(tmp_path):
    """qwen2 takes the per-op path (the fused C layer adds no biases), qwen3 the fused one too."""
    q2 = Model.load(write_tiny_family(tmp_path / "q2.gguf", "qwen2", Q8_0))
    q3 = Model.load(write_tiny_family(tmp_path / "q3.gguf", "qwen3", Q8_0))
    assert type(q2.net).__name__ == "Qwen2Model" and q2.net.fused is None
    assert all(L.bq is not None and L.attn_q_norm is None for L in q2.net.layers)
    assert type(q3.net).__name__ == "Qwen3Model" and all(L.attn_q_norm is not None and L.bq is None for L in q3.net.layers)
    assert q3.hparams.n_embd_head_k == 32 != q3.hparams.n_embd // q3.hparams.n_head
    assert (q3.net.fused is not None) == (load_kernels() is not None)


@pytest.mark.parametrize("arch,extra,names", [
    ("qwen2", ("rope_freqs.weight",), ["'rope_freqs.weight'"]),
    ("qwen3", ("blk.0.attn_output.bias", "blk.1.attn_output.bias", "output.bias"),
     ["'blk.{0-1}.attn_output.bias' (2 tensors)", "'output.bias'"]),
    ("llama", ("blk.1.ffn_gate_inp.weight",), ["'blk.1.ffn_gate_inp.weight'"]),
    ("phi3", ("rope_freqs.weight", "blk.0.attn_q.weight"), ["'rope_freqs.weight'", "'blk.0.attn_q.weight'"]),
])
def test_unused_tensors_refused(tmp_path, arch, extra, names):
    """A tensor the architecture does not read is a load error naming it (llama.cpp: wrong
    number of tensors), from the header alone (`llamapy mem`) and from Model.load."""
    path = write_tiny_family(tmp_path / "x.gguf", arch, F16, extra_tensors=extra)
    n = len(GGUFHeader(path).tensors)
    with pytest.raises(GGUFError) as e:
        hparams_from_gguf(GGUFHeader(path))
    msg = str(e.value)
    assert f"'{arch}' architecture does not read" in msg and all(x in msg for x in names), msg
    assert f"wrong number of tensors; expected {n - len(extra)}, got {n}" in msg
    with pytest.raises(GGUFError, match="does not read"):
        Model.load(path)


@pytest.mark.parametrize("arch,key,value", [
    ("llama", "rope.scaling.type", "yarn"),
    ("qwen2", "rope.scaling.type", "longrope"),
    ("qwen2", "attention.sliding_window", 4096),
    ("qwen3", "final_logit_softcapping", 30.0),
    ("llama", "attn_logit_softcapping", 50.0),
    ("qwen3", "expert_count", 8),
    ("qwen2", "rope.scaling.attn_factor", 0.5),
    ("llama", "attention.causal", False),
    ("phi3", "rope.scaling.type", "longrope"),
    ("gemma2", "rope.scaling.attn_factor", 0.5),
])
def test_unimplemented_keys_refused(tmp_path, arch, key, value):
    path = write_tiny_family(tmp_path / "k.gguf", arch, F16, extra_keys={key: value})
    with pytest.raises(GGUFError, match=f"metadata '{arch}.{key}' .* llamapy does not implement for '{arch}'"):
        hparams_from_gguf(GGUFHeader(path))


@pytest.mark.parametrize("keys,scale", [
    ({"rope.scaling.type": "linear", "rope.scaling.factor": 4.0}, 0.25),
    ({"rope.scaling.type": "none", "rope.scaling.factor": 4.0}, 1.0),  # llama_context: none never scales
    ({"rope.scale_linear": 2.0}, 0.5),  # the older key
    ({"attention.sliding_window": 0, "expert_count": 0}, 1.0),  # neutral values load
])
def test_rope_scaling_keys(tmp_path, keys, scale):
    path = write_tiny_family(tmp_path / "s.gguf", "qwen2", F16, extra_keys=keys)
    assert hparams_from_gguf(GGUFHeader(path)).rope_freq_scale == scale


def test_rope_freq_factors(tmp_path):
    """Llama 3's rope_freqs.weight is read (not ignored): ggml_rope_ext's freq_factors divide
    pair i's angle, theta = pos * base^(-2i/n_rot) / factor[i], on both the CPU and the torch
    formula's path."""
    import torch

    from llamapy.model.rope import RopeParams, rope_cos_sin

    m = Model.load(write_tiny_family(tmp_path / "l3.gguf", "llama", F16, rope_freqs=True))
    ff = m.net.rope.freq_factors
    assert ff is not None and len(ff) == 8 and ff[0] == 1.0 and abs(ff[-1] - 8.0) < 1e-5
    pos = torch.arange(5)
    cos, sin = rope_cos_sin(pos, m.net.rope)
    theta = pos[:, None].double() * 10000.0 ** (-torch.arange(0, 16, 2).double() / 16) / torch.tensor(ff).double()
    torch.testing.assert_close(cos[:, 0], theta.cos().float())
    torch.testing.assert_close(sin[:, 0], theta.sin().float())
    plain = RopeParams(16, 10000.0)
    assert not torch.allclose(rope_cos_sin(pos, plain)[0], cos)


def test_gemma3_swa_pattern_key():
    """{arch}.attention.sliding_window_pattern (llama_model_base::load_swa_pattern): a period,
    or one flag per layer, else the architecture's period 6."""
    from types import SimpleNamespace

    from llamapy.model.hparams import _swa_layers

    def header(value):
        fields = {} if value is None else {
            "gemma3.attention.sliding_window_pattern": SimpleNamespace(name="gemma3.attention.sliding_window_pattern",
                                                                       offset=123, value=value)}
        return SimpleNamespace(path=Path("g.gguf"), fields=fields)

    assert _swa_layers(header(None), "gemma3", 7, 6) == (True,) * 5 + (False, True)
    assert _swa_layers(header(3), "gemma3", 6, 6) == (True, True, False) * 2
    assert _swa_layers(header([True, False, True]), "gemma3", 3, 6) == (True, False, True)
    with pytest.raises(GGUFError, match="sliding_window_pattern' \\(key at byte 123\\)"):
        _swa_layers(header([True]), "gemma3", 3, 6)


def test_gemma2_hparams(tmp_path):
    """llama_model_gemma2::load_arch_hparams: the window on the even layers (set_swa_pattern(2)),
    4096 cells unless the file says otherwise, the window layers' RoPE base the global one, the
    soft-capping keys read (llama.cpp's 50 and 30 when absent); the keys gemma2 implements are
    still refused for the llama family."""
    m = Model.load(write_tiny_family(tmp_path / "g.gguf", "gemma2", F16, n_layer=3))
    hp = m.hparams
    assert type(m.net).__name__ == "Gemma2Model" and m.net.fused is None
    assert hp.n_swa == 16 and hp.swa_layers == (True, False, True)
    assert hp.rope_freq_base_swa == hp.rope_freq_base == 10000.0 and m.net.rope_swa == m.net.rope_global
    assert (m.net.f_attn_logit_softcapping, m.net.f_final_logit_softcapping) == (10.0, 20.0)
    assert m.net.f_attention_scale == 1 / 32**0.5 and all(L.attn_q_norm is None for L in m.net.layers)
    bare = {k: None for k in ("attention.sliding_window", "attn_logit_softcapping", "final_logit_softcapping")}
    path = write_tiny_family(tmp_path / "d.gguf", "gemma2", F16, n_layer=3, extra_keys=bare)
    assert not any(k.startswith("gemma2.") and k[7:] in bare for k in GGUFHeader(path).fields)
    d = Model.load(path)
    assert d.hparams.n_swa == 4096 and d.hparams.swa_layers == (True, False, True)
    assert (d.net.f_attn_logit_softcapping, d.net.f_final_logit_softcapping) == (50.0, 30.0)
    with pytest.raises(GGUFError, match="does not read"):  # llama.cpp's gemma2 reads no output.weight
        hparams_from_gguf(GGUFHeader(write_tiny_family(tmp_path / "o.gguf", "gemma2", F16, tied=False)))
    for arch in ("qwen3", "llama"):
        p = write_tiny_family(tmp_path / f"{arch}.gguf", arch, F16, extra_keys={"attn_logit_softcapping": 50.0})
        with pytest.raises(GGUFError, match=f"'{arch}.attn_logit_softcapping'"):
            hparams_from_gguf(GGUFHeader(p))


def test_softcap_attention():
    """Gemma 2's soft-capped attention, flash or not, one mask or gathered cells: softmax(c *
    tanh(q·kᵀ·scale / c) + mask)·v, the mask after the cap (llama.cpp build_attn_mha)."""
    import torch

    from llamapy.model.layers import attention, attention_gathered

    g = torch.Generator().manual_seed(0)
    n, n_kv, n_head, n_head_kv, d, scale, c = 3, 5, 4, 2, 8, 0.5, 2.0
    q, k, v = (torch.randn(m, h, d, generator=g) * 3 for m, h in ((n, n_head), (n_kv, n_head_kv), (n_kv, n_head_kv)))
    mask = torch.zeros(n, n_kv)
    mask[0, 3:] = float("-inf")
    kr, vr = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    kq = torch.einsum("thd,khd->htk", q, kr) * scale
    want = torch.einsum("htk,khd->thd", ((kq / c).tanh() * c + mask).softmax(-1), vr).reshape(n, -1)
    for flash in (True, False):
        torch.testing.assert_close(attention(q, k, v, mask, scale, flash, softcap=c), want)
        got = attention_gathered(q, k.reshape(n_kv, -1), v.reshape(n_kv, -1), mask[None], torch.arange(n), n_head_kv,
                                 scale, flash, softcap=c)
        torch.testing.assert_close(got, want)
    assert not torch.allclose(attention(q, k, v, mask, scale), want)  # the cap matters here


def test_phi3_layers(tmp_path, caplog):
    """phi3 reads attn_qkv as the Q|K|V product and ffn_up as gate|up (llama's stacked layout),
    takes the fused C layer where the kernels build, and reads its sliding window without
    applying it (llama.cpp: "Phi SWA is currently disabled")."""
    import logging

    with caplog.at_level(logging.WARNING):
        m = Model.load(write_tiny_family(tmp_path / "p.gguf", "phi3", Q8_0))
    assert type(m.net).__name__ == "Phi3Model" and m.net.rope.rope_type == 2
    assert m.hparams.n_swa == 0 and m.hparams.swa_layers == () and "Phi SWA is currently disabled" in caplog.text
    n_embd, n_head, n_head_kv, n_ff, d = 64, 4, 2, 128, 16
    for L in m.net.layers:
        assert (L.wqkv.n_out, L.wqkv.n_in) == ((n_head + 2 * n_head_kv) * d, n_embd)
        assert (L.ffn_gate_up.n_out, L.ffn_gate_up.n_in) == (2 * n_ff, n_embd)
    assert (m.net.fused is not None) == (load_kernels() is not None)


def test_gemma2_estimate_counts_the_kq(tmp_path):
    """Gemma 2's soft-capped attention materializes KQ even with flash attention on (model/
    attend.py): `llamapy mem`'s compute terms count it there (hp.attn_soft_cap), the llama
    family's do not."""
    from llamapy.memory.estimate import estimate_memory
    from llamapy.params import ContextParams

    def kq_terms(arch: str) -> list[str]:
        p = write_tiny_family(tmp_path / f"{arch}.gguf", arch, F16)
        est = estimate_memory(p, ContextParams(n_ctx=256, flash_attn="on"))
        return [t.name for t in est.compute_terms if t.name.startswith("kq (")]

    assert kq_terms("gemma2") == ["kq (no flash attn)"] and kq_terms("qwen3") == []


@pytest.mark.parametrize("n_batch,n_ubatch,fa", [(256, 8, "on"), (256, 256, "off")])
def test_gemma2_sequences_and_fa_off(tmp_path, n_batch, n_ubatch, fa):
    """Gemma 2's soft-capped attention with the 4 chunks as 4 sequences of one batch (the
    window and the streams' cells together) and with flash attention off: llama.cpp's
    logits as closely as one sequence at a time (measured: the same KLD, below 1e-6)."""
    meta = json.loads((REF / "gemma2-f16.json").read_text())
    model = Model.load(_write(tmp_path, meta["writer"]))
    stats = KldStats()
    with BaseFile.open(REF / "gemma2-f16.kld", model.n_vocab) as base:
        ctx = make_context(model, base.n_ctx, n_batch, n_ubatch, flash_attn=fa)
        perplexity(ctx, base.tokens, base.n_ctx, on_logits=lambda lg, tg: stats.add(lg, base.next_chunk(), tg))
    assert stats.count == 124 and stats.mean_kld <= LIMITS["f16"][0] and stats.same_top >= LIMITS["f16"][1]


class _Touch:
    """An expert matrix that records its expert's index when called."""

    def __init__(self, m, e: int, seen: list[int]) -> None:
        self.m, self.e, self.seen = m, e, seen

    def __call__(self, x):
        self.seen.append(self.e)
        return self.m(x)


@pytest.mark.parametrize("arch,n_expert", [("qwen3moe", 8), ("llama", 4)])
def test_moe_routing(tmp_path, arch, n_expert):
    """The rows of one ubatch are routed to different experts (the router's own choices), each
    active expert runs once per layer on its rows only, and a one-row ubatch (decode) touches
    only its k = 2 experts' weights; model/moe.py's grouped products equal the plain per-row
    sum over the selected experts."""
    import torch

    from llamapy.model.layers import rms_norm

    m = Model.load(write_tiny_family(tmp_path / "m.gguf", arch, F16, n_expert=n_expert))
    hp = m.hparams
    assert (hp.n_expert, hp.n_expert_used) == (n_expert, 2) and (m.net.fused is None or m.net.fused.moe)
    assert all(L.ffn_gate_up is None and L.moe is not None and L.moe.n_expert == n_expert for L in m.net.layers)
    moe = m.net.layers[0].moe
    seen: list[int] = []
    moe.gate = [_Touch(g, e, seen) for e, g in enumerate(moe.gate)]
    g = torch.Generator().manual_seed(0)
    x = rms_norm(torch.randn(64, hp.n_embd, generator=g), m.net.layers[0].ffn_norm, hp.f_norm_rms_eps)
    w, sel = moe.route(x)
    assert sel.shape == (64, 2) and torch.allclose(w.sum(-1), torch.ones(64))
    assert len(set(sel[:, 0].tolist())) >= 3  # the rows' first choices differ
    y = moe.add_into(x, torch.zeros(64, hp.n_embd))
    assert sorted(seen) == sorted(set(sel.flatten().tolist()))  # each active expert once
    want = torch.zeros(64, hp.n_embd)
    for i in range(64):
        for j in range(2):
            e = int(sel[i, j])
            h = torch.nn.functional.silu(moe.gate[e].m(x[i : i + 1])) * moe.up[e](x[i : i + 1])
            want[i] += w[i, j] * moe.down[e](h)[0]
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-5)
    seen.clear()
    moe.add_into(x[5:6], torch.zeros(1, hp.n_embd))
    assert sorted(seen) == sorted(sel[5].tolist())  # decode: only the row's 2 experts


def test_moe_keys(tmp_path):
    """expert_count is read only where implemented (llama, qwen3moe); expert_used_count must
    be in 1..expert_count; the router and experts of a file without expert_count are refused."""
    with pytest.raises(GGUFError, match="'qwen3.expert_count'"):
        hparams_from_gguf(GGUFHeader(write_tiny_family(tmp_path / "q3.gguf", "qwen3", F16, n_expert=4)))
    with pytest.raises(GGUFError, match="expert_used_count' .* must be in 1..4"):
        hparams_from_gguf(GGUFHeader(write_tiny_family(tmp_path / "u.gguf", "llama", F16, n_expert=4, n_expert_used=5)))
    with pytest.raises(GGUFError, match="expert_weights_scale"):
        hparams_from_gguf(GGUFHeader(write_tiny_family(tmp_path / "s.gguf", "qwen3moe", F16,
                                                       extra_keys={"expert_weights_scale": 2.5})))


@pytest.mark.parametrize("arch,n_expert,n_ff_exp", [("qwen3moe", 8, 64), ("llama", 4, 128)])
def test_moe_mem_counts_every_tensor(tmp_path, arch, n_expert, n_ff_exp):
    """`llamapy mem` counts the experts exactly: each 3-D ffn_*_exps tensor as n_expert F16
    matrices (WeightLoader.experts), the router ffn_gate_inp as an F32 matrix, and the loaded
    model's resident bytes are the prediction.  The compute terms hold the routing buffers,
    sized by -ub, and the FFN products at the expert width."""
    from llamapy.memory.estimate import estimate_memory
    from llamapy.params import ContextParams

    path = write_tiny_family(tmp_path / f"{arch}.gguf", arch, F16, n_expert=n_expert)
    n_embd, n_layer, n_head, n_head_kv, n_vocab = 64, 2, 4, 2, 264
    d = 32 if arch == "qwen3moe" else n_embd // n_head
    f16 = n_vocab * n_embd + n_layer * (n_embd * (n_head + 2 * n_head_kv) * d + n_head * d * n_embd
                                        + 3 * n_expert * n_embd * n_ff_exp)
    f32 = n_embd + n_layer * (2 * n_embd + n_expert * n_embd) + (n_layer * 2 * d if arch == "qwen3moe" else 0)
    file_bytes = 2 * f16 + 4 * f32
    d_mem = _mem_json(path)
    assert d_mem["weights_file"] == file_bytes
    model = Model.load(path)
    assert model.n_bytes_file == file_bytes and model.hparams.n_ff_exp == n_ff_exp
    assert d_mem["buffers"]["model"] == model.n_bytes_resident
    assert d_mem["process"]["weights"] == model.n_bytes_resident

    def terms(n_ubatch: int) -> dict:
        est = estimate_memory(path, ContextParams(n_ctx=256, n_batch=256, n_ubatch=n_ubatch))
        return {t.name: t.shape for t in est.compute_terms}

    t64, t8 = terms(64), terms(8)
    assert t64["ffn_moe_logits"] == (64, n_expert) and t8["ffn_moe_logits"] == (8, n_expert)
    assert t64["ffn_moe_topk (selected experts)"] == (64, 2) and t64["ffn_gate (act)"] == (64, n_ff_exp)
    assert "ffn_moe_logits" not in terms_dense(tmp_path)


def terms_dense(tmp_path: Path) -> set[str]:
    from llamapy.memory.estimate import estimate_memory
    from llamapy.params import ContextParams

    est = estimate_memory(write_tiny_family(tmp_path / "dense.gguf", "qwen3", F16), ContextParams(n_ctx=256))
    return {t.name for t in est.compute_terms}
