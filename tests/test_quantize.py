"""`llamapy quantize` (llama-quantize's role): which tensor gets which type (llama-quantize's
rules), the Q6_K quantizer for the output matrix, the files load and run, and bad input is a
one-line error that writes nothing."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from llamapy.cli import main
from llamapy.gguf.quants_pack_k import quantize_q6_k
from llamapy.quantize import QuantizeError, quantize_file, target_type

T = gguf.GGMLQuantizationType


def tensors(path: Path) -> dict[str, tuple[T, np.ndarray]]:
    """name -> (type, float32 values [n_out, n_in] or [n])."""
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        out[t.name] = (T(t.tensor_type), gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(shape))
    return out


def rel_rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(((a - b) ** 2).mean() / (b**2).mean()))


@pytest.fixture(scope="module")
def tiny256(tmp_path_factory) -> Path:
    """An F32 tiny llama whose rows are whole 256-blocks (n_embd 256): its tied output matrix
    (token_embd) gets Q6_K in the Q4/Q5 mixes."""
    from tiny_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("q") / "tiny256.gguf", n_embd=256, n_head=4, n_head_kv=2, n_ff=512)


def test_q6_k_quantizer_against_gguf_dequantization():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(96, 256, generator=g) * torch.rand(96, 1, generator=g)  # blocks of different scales
    x[7] = 0.0
    x[9, 32:48] = 0.0  # one zero 16-group
    x[11, 5] = 40.0  # an outlier
    b = quantize_q6_k(x)
    assert b.shape == (96, 210) and b.dtype == torch.uint8
    y = torch.from_numpy(gguf.quants.dequantize(b.numpy(), T.Q6_K).reshape(96, 256))
    assert torch.all(y[7] == 0) and torch.all(y[9, 32:48] == 0)
    err = ((y - x).pow(2).mean() / x.pow(2).mean()).sqrt().item()
    q5 = gguf.quants.dequantize(gguf.quants.quantize(x.numpy(), T.Q5_0), T.Q5_0)
    q8 = gguf.quants.dequantize(gguf.quants.quantize(x.numpy(), T.Q8_0), T.Q8_0)
    # 6 bits: between Q8_0's error and Q5_0's (about 2x under Q5_0 on Gaussian blocks)
    assert rel_rmse(q8, x.numpy()) < err < 0.6 * rel_rmse(q5, x.numpy())
    # every element within half a step of its 16-group's scale (d * sc), the outlier's block too
    d = torch.from_numpy(b[:, 208:210].numpy().copy().view(np.float16).astype(np.float32))  # [96, 1]
    sc = b[:, 192:208].view(torch.int8).float()  # [96, 16]
    step = (d * sc).repeat_interleave(16, dim=1)  # signed: the levels are step * (-32 .. 31)
    r = x / torch.where(step == 0, torch.ones_like(step), step)
    inside = (r >= -32) & (r <= 31) & (step != 0)
    assert inside.float().mean() > 0.9  # (the search may clip a group's largest value to gain on the rest)
    assert torch.all(((y - x).abs() <= 0.5 * step.abs() * (1 + 1e-5))[inside])


@pytest.mark.parametrize("n_in,qtype,want,fell_back_from", [
    (576, T.Q4_0, T.Q8_0, T.Q6_K), (640, T.Q5_1, T.Q8_0, T.Q6_K), (2048, T.Q4_1, T.Q6_K, None),
    (4096, T.Q5_0, T.Q6_K, None), (2048, T.Q8_0, T.Q8_0, None), (2048, T.F16, T.F16, None),
    (2048, T.BF16, T.BF16, None),
])
def test_output_matrix_rule(n_in, qtype, want, fell_back_from):
    """llama-quantize's output rule: Q6_K in the 4- and 5-bit mixes, falling back to Q8_0 where
    the rows are not whole 256-blocks; the mix's own type for Q8_0 and the float types."""
    assert target_type("output.weight", (1000, n_in), T.F32, qtype, "output.weight") == (want, fell_back_from)
    assert target_type("token_embd.weight", (1000, n_in), T.F32, qtype, "token_embd.weight") == (want, fell_back_from)
    # with a separate output matrix the embeddings take the mix's type
    assert target_type("token_embd.weight", (1000, n_in), T.F32, qtype, "output.weight") == (qtype, None)


def test_kept_and_fallback_tensors():
    out = "output.weight"
    assert target_type("blk.0.attn_norm.weight", (576,), T.F32, T.Q4_0, out) == (T.F32, None)  # 1-D
    assert target_type("blk.0.attn_q_norm.weight", (4, 64), T.F32, T.Q4_0, out) == (T.F32, None)
    assert target_type("position_embd.weight", (512, 64), T.F32, T.Q4_0, out) == (T.F32, None)
    assert target_type("blk.0.attn_q.bias", (64, 64), T.F32, T.Q4_0, out) == (T.F32, None)
    # rows not a whole number of 32-blocks: F16, counted as a fallback
    assert target_type("blk.0.ffn_down.weight", (64, 80), T.F32, T.Q4_0, out) == (T.F16, T.Q4_0)
    assert target_type("blk.0.ffn_down.weight", (64, 80), T.F32, T.F16, out) == (T.F16, None)
    # not whole blocks of the mix's type: Q8_0 (llama_tensor_get_type_impl), then F16 (tensor_type_fallback)
    assert target_type("output.weight", (64, 80), T.F32, T.Q5_0, out) == (T.F16, T.Q8_0)


@pytest.mark.parametrize("type_name,bound", [("Q8_0", 0.01), ("Q5_1", 0.05), ("Q4_0", 0.12), ("F16", 1e-3), ("BF16", 6e-3)])
def test_quantized_file_types_and_values(tiny256, tmp_path, type_name, bound):
    dst = tmp_path / f"tiny-{type_name}.gguf"
    rep = quantize_file(tiny256, dst, type_name)
    src, got = tensors(tiny256), tensors(dst)
    assert set(got) == set(src)
    qtype = T[type_name]
    for name, (t, v) in got.items():
        if v.ndim == 1:
            assert t == T.F32 and np.array_equal(v, src[name][1])
            continue
        want = (T.Q6_K if qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1) else qtype) if name == "token_embd.weight" else qtype
        assert t == want, name
        assert rel_rmse(v, src[name][1]) < (0.03 if t == T.Q6_K else bound), name
    r = gguf.GGUFReader(dst)
    assert int(r.fields["general.file_type"].contents()) == {"Q8_0": 7, "Q5_1": 9, "Q4_0": 2, "F16": 1, "BF16": 32}[type_name]
    assert rep.bytes_out == sum(int(t.n_bytes) for t in r.tensors) and rep.bytes_in == sum(
        int(t.n_bytes) for t in gguf.GGUFReader(tiny256).tensors)


def six_token_logits(path) -> torch.Tensor:
    """The logits [6, n_vocab] of one 6-token prompt on the model at path."""
    from llamapy.batch.batch import Batch
    from llamapy.context import Context, ContextParams
    from llamapy.model.model import Model

    ctx = Context(Model.load(path), ContextParams(n_ctx=64))
    b = Batch()
    for i, t in enumerate([5, 17, 101, 33, 250, 9]):
        b.add(t, i, [0], logits=True)
    ctx.decode(b)
    return ctx.get_logits().clone()


def test_quantized_model_runs_close_to_its_source(tiny256, tmp_path):
    """The Q8_0 file loads and its logits stay near the F32 model's (one more check that the
    blocks were written in the order the engine reads them)."""
    dst = tmp_path / "tiny-q8.gguf"
    quantize_file(tiny256, dst, "Q8_0")
    a, q = six_token_logits(tiny256), six_token_logits(dst)
    cos = torch.nn.functional.cosine_similarity(a.float(), q.float(), dim=-1)
    assert torch.all(cos > 0.99), cos
    assert (a.argmax(-1) == q.argmax(-1)).float().mean().item() >= 0.8


def test_requantize_refused_then_allowed(smollm2_path, tmp_path):
    """SmolLM2's Q4_1 blocks to Q4_0 would round twice: a one-line error and no file, unless
    --allow-requantize; dequantizing it to F16 (the draft/target pair) needs no flag."""
    dst = tmp_path / "s-q40.gguf"
    with pytest.raises(QuantizeError, match=r"is Q4_1: requantizing it to Q4_0.*--allow-requantize"):
        quantize_file(smollm2_path, dst, "Q4_0")
    assert not dst.exists() and not list(tmp_path.iterdir())
    rep = quantize_file(smollm2_path, dst, "Q4_0", allow_requantize=True)
    assert rep.counts["Q4_0"] > 200 and rep.counts["Q8_0"] == 1  # token_embd (576 = not whole 256-blocks): Q8_0
    assert [(p.name, p.fell_back_from) for p in rep.plans if p.fell_back_from] == [("token_embd.weight", T.Q6_K)]


def test_f16_target_matches_the_q4_1_model(smollm2_path, tmp_path):
    """The F16 file made from the Q4_1 one holds the same weights to f16's rounding: every
    matrix within half an f16 step of gguf's dequantization of the Q4_1 blocks."""
    dst = tmp_path / "s-f16.gguf"
    rep = quantize_file(smollm2_path, dst, "F16")
    assert rep.counts == {"F16": 211, "F32": 61}
    src, got = tensors(smollm2_path), tensors(dst)
    for name, (t, v) in got.items():
        ref = src[name][1]
        if v.ndim == 2:
            assert t == T.F16
            assert np.array_equal(v, ref.astype(np.float16).astype(np.float32)), name


def test_cli_errors_and_force(tiny256, tmp_path, capsys):
    dst = tmp_path / "out.gguf"
    assert main(["quantize", str(tiny256), str(dst), "Q4_0"]) == 0
    err = capsys.readouterr().err
    assert "llama_model_quantize_impl: model size  =" in err and "quant size  =" in err and "100%" in err
    before = dst.read_bytes()
    assert main(["quantize", str(tiny256), str(dst), "Q8_0"]) == 1
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "exists" in err and "--force" in err
    assert dst.read_bytes() == before
    assert main(["quantize", str(tiny256), str(dst), "Q3_K_M"]) == 1
    err = capsys.readouterr().err
    assert "'Q3_K_M'" in err and "Q4_0" in err and err.strip().count("\n") == 0
    assert main(["quantize", str(tiny256), str(tiny256), "Q8_0", "--force"]) == 1
    assert "is the input" in capsys.readouterr().err
    assert main(["quantize", str(tiny256), str(tmp_path / "no" / "x.gguf"), "Q8_0"]) == 1
    assert "output folder" in capsys.readouterr().err
    assert main(["quantize", "--force", str(tiny256), str(dst), "Q8_0"]) == 0
    assert dst.read_bytes() != before and tensors(dst)["blk.0.attn_q.weight"][0] == T.Q8_0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gguf"]  # no partial file left


def test_failure_midway_leaves_the_old_output(tiny256, tmp_path, monkeypatch):
    """A conversion that fails part-way (here the 5th tensor's) leaves neither a partial file
    nor a changed output, even with force."""
    import llamapy.quantize as q

    dst = tmp_path / "out.gguf"
    quantize_file(tiny256, dst, "Q8_0")
    before = dst.read_bytes()
    calls = {"n": 0}
    real = q.encode

    def failing(x, out_type):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError("disk full")
        return real(x, out_type)

    monkeypatch.setattr(q, "encode", failing)
    with pytest.raises(OSError, match="disk full"):
        quantize_file(tiny256, dst, "Q4_0", force=True)
    assert dst.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gguf"]
