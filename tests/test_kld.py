"""llama-perplexity's KL-divergence mode (bench/kld.py): the base file is llama.cpp's format
(rows checked against a literal port of its C loop), a round trip with the same model gives
KLD ~ 0 and 100% same top p, another model's KLD equals an independent float64 KL(base||Q)
from the full-precision logits within the uint16 quantization error, and bad files fail with
errors that name the numbers."""
from __future__ import annotations

import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from llamapy.bench import kld
from llamapy.bench import perplexity as ppl
from llamapy.model.model import Model

N_CTX = 32
N_CHUNK = 8  # 8 * 15 = 120 scored tokens: enough for the final statistics (>= 100)


def _f32(x) -> np.float32:
    return np.float32(x)


def _c_row(logits: list[float]) -> list[int]:
    """perplexity.cpp's log_softmax(n_vocab, logits, uint16_t *, tok), element by element in
    float32 (double for sum_exp), nearest_int by its bit trick: the uint16 of one row."""
    lg = [_f32(v) for v in logits]
    max_logit, min_logit = lg[0], lg[0]
    for v in lg[1:]:
        max_logit, min_logit = max(max_logit, v), min(min_logit, v)
    min_logit = max(min_logit, _f32(max_logit - _f32(16)))
    sum_exp = 0.0
    for v in lg:
        sum_exp += float(np.exp(_f32(v - max_logit)))
    log_sum_exp = _f32(math.log(sum_exp))
    min_log_prob = _f32(_f32(min_logit - max_logit) - log_sum_exp)
    scale = _f32(_f32(max_logit - min_logit) / _f32(65535))

    def nearest_int(fval: np.float32) -> int:
        i = struct.unpack("<i", struct.pack("<f", _f32(fval + _f32(12582912))))[0]
        return (i & 0x007FFFFF) - 0x00400000

    out = list(struct.unpack("<4H", struct.pack("<ff", scale, min_log_prob)))
    inv_scale = _f32(1) / scale if scale else _f32(0)
    for v in lg:
        out.append((nearest_int(_f32(inv_scale * _f32(v - min_logit))) if v > min_logit else 0) & 0xFFFF if scale else 0)
    out += [0] * (kld.row_width(len(lg)) - len(out))
    return out


def test_rows_are_llama_cpps_bytes():
    g = torch.Generator().manual_seed(0)
    rows = torch.cat([torch.randn(3, 101, generator=g) * 9,  # odd n_vocab: one pad uint16
                      torch.randn(1, 101, generator=g) * 0.5,  # range < 16: nothing clamped
                      torch.full((1, 101), 2.5)])  # scale 0: all zeros
    q = kld.quantize_log_probs(rows)
    assert q.dtype == np.dtype("<u2") and q.shape == (5, kld.row_width(101)) == (5, 106)
    for r in range(5):
        assert q[r].tolist() == _c_row(rows[r].tolist()), r
    logp, scale = kld.dequantize_log_probs(q, 101)
    exact = torch.log_softmax(rows.double(), dim=1)
    kept = exact > exact.max(dim=1, keepdim=True).values - 16
    assert torch.allclose(logp.double()[kept], exact[kept], atol=float(scale.max()) * 0.5 + 1e-5)


def _tokens(model: Model, n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.n_vocab, (n,), generator=g).tolist()


def _write_base(model: Model, tokens: list[int], path: Path, record: list | None = None) -> ppl.PerplexityResult:
    with kld.BaseWriter.create(path, N_CTX, model.n_vocab, tokens, N_CHUNK) as w:
        def hook(lg, t):
            if record is not None:
                record.append(lg.double().clone())
            w(lg, t)
        return ppl.perplexity(ppl.make_context(model, N_CTX, 64, 32), tokens, N_CTX, N_CHUNK, on_logits=hook)


def _run_kld(model: Model, path: Path, record: list | None = None) -> kld.KldStats:
    with kld.BaseFile.open(path, model.n_vocab) as base:
        run = kld.KldRun(base)

        def hook(lg, t):
            if record is not None:
                record.append(lg.double().clone())
            run(lg, t)
        ppl.perplexity(ppl.make_context(model, base.n_ctx, 64, 32), base.tokens, base.n_ctx, on_logits=hook)
        assert base.chunks_read == base.n_chunk
    return run.stats


@pytest.fixture(scope="module")
def tiny_other(tmp_path_factory) -> Model:
    from tiny_model import write_tiny_llama

    return Model.load(write_tiny_llama(tmp_path_factory.mktemp("tiny1") / "tiny-seed1.gguf", seed=1))


def test_round_trip_same_model(tiny, tmp_path, one_thread):
    tokens = _tokens(tiny, N_CHUNK * N_CTX + 5, 3)
    path = tmp_path / "base.kld"
    res = _write_base(tiny, tokens, path)
    assert res.n_chunk == N_CHUNK
    nv = kld.row_width(tiny.n_vocab)
    assert path.stat().st_size == 20 + 4 * N_CHUNK * N_CTX + 2 * N_CHUNK * kld.n_scored(N_CTX) * nv
    with kld.BaseFile.open(path, tiny.n_vocab) as base:
        assert (base.n_ctx, base.n_vocab, base.n_chunk) == (N_CTX, tiny.n_vocab, N_CHUNK)
        assert base.tokens == tokens[:N_CHUNK * N_CTX]
        base.check_tokens(tokens)  # a longer text with the same start is fine
    st = _run_kld(tiny, path)
    assert st.count == N_CHUNK * kld.n_scored(N_CTX)
    assert abs(st.mean_kld) < 1e-4 and st.same_top == 1.0
    assert math.log(res.ppl) == pytest.approx(st.sum_nll / st.count, rel=1e-5)  # PPL(Q) is the perplexity run's
    lines = st.summary_lines()
    for head in ("====== Perplexity statistics ======", "====== KL divergence statistics ======",
                 "====== Token probability statistics ======"):
        assert head in lines
    assert "Same top p: 100.000 ± 0.000 %" in lines
    assert any(re.fullmatch(r"Mean    KLD: +-?0\.0000\d\d ± +\d\.\d{6}", ln) for ln in lines)
    assert any(re.fullmatch(r"Mean ln\(PPL\(Q\)/PPL\(base\)\)     : +-?\d+\.\d{6} ± +\d+\.\d{6}", ln) for ln in lines)
    assert any(re.fullmatch(r"RMS Δp    : +\d+\.\d{3} ± \d\.\d{3} %", ln) for ln in lines)
    assert re.fullmatch(r"   8    +[\d.]+ ± +[\d.]+ +-?[\d.]+ ± +[\d.]+ +-?[\d.]+ ± +[\d.]+ +[\d.]+ ± +[\d.]+ % +100\.000 ± +0\.000 %",
                        st.chunk_line(8))


def _exact_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    lp, lq = torch.log_softmax(p_logits.double(), 1), torch.log_softmax(q_logits.double(), 1)
    return (lp.exp() * (lp - lq)).sum(1)


def test_other_model_kld_is_kl_base_q(tiny, tiny_other, tmp_path, one_thread):
    tokens = _tokens(tiny, N_CHUNK * N_CTX, 4)
    path = tmp_path / "base.kld"
    p_rows: list[torch.Tensor] = []
    q_rows: list[torch.Tensor] = []
    _write_base(tiny, tokens, path, p_rows)
    st = _run_kld(tiny_other, path, q_rows)
    P, Q = torch.cat(p_rows), torch.cat(q_rows)
    want = _exact_kl(P, Q)  # [n] float64, full precision, no -16 cut
    got = torch.cat(st.kld_values).double()
    assert st.mean_kld > 0.1
    # each uint16 log-prob is off by at most scale/2 <= 16/65535/2 =: d, so each term p*(log p - log q)
    # by about p*d*(1 + log p - log q): d*(1 + KL) per token; the dropped p < e^-16 add ~n_vocab*1e-7*KL
    d = 16 / 65535 / 2
    assert ((got - want).abs() <= d * (1 + want.abs()) + 1e-5).all()
    assert st.mean_kld == pytest.approx(float(want.mean()), rel=2 * d)
    same = (P.argmax(1) == Q.argmax(1)).double().mean()
    assert st.same_top == pytest.approx(float(same), abs=1.5 / st.count)


def test_perturbed_logits_moderate_distributions():
    """The statistics on their own, on distributions where most of the vocabulary counts."""
    g = torch.Generator().manual_seed(5)
    n, n_vocab = 150, 257
    P = torch.randn(n, n_vocab, generator=g) * 2.0
    Q = P + 0.4 * torch.randn(n, n_vocab, generator=g)
    tgt = torch.randint(0, n_vocab, (n,), generator=g)
    st = kld.KldStats()
    st.add(Q, kld.quantize_log_probs(P), tgt)
    want = _exact_kl(P, Q)
    got = torch.cat(st.kld_values).double()
    assert torch.allclose(got, want, rtol=1e-3, atol=2e-4)
    lp, lq = torch.log_softmax(P.double(), 1), torch.log_softmax(Q.double(), 1)
    assert st.sum_nll_base / n == pytest.approx(float(-lp.gather(1, tgt[:, None]).mean()), abs=2e-4)
    assert st.sum_nll / n == pytest.approx(float(-lq.gather(1, tgt[:, None]).mean()), rel=1e-6)
    p_diff = lq.gather(1, tgt[:, None]).exp() - lp.gather(1, tgt[:, None]).exp()
    assert st.sum_p_diff / n == pytest.approx(float(p_diff.mean()), abs=1e-5)
    assert st.max_p_diff == pytest.approx(float(p_diff.abs().max()), abs=1e-5)
    assert st.same_top == pytest.approx(float((P.argmax(1) == Q.argmax(1)).double().mean()), abs=1.5 / n)
    assert 0 < st.same_top < 1
    assert len(st.summary_lines()) == 39 and kld.KldStats().summary_lines() == []


def test_bad_files_name_the_numbers(tiny, tmp_path, one_thread):
    bad = tmp_path / "bad.kld"
    bad.write_bytes(b"_notlog_" + bytes(64))
    with pytest.raises(ValueError, match=r"does not look like a file containing log-probabilities \(starts with b'_notlog_'"):
        kld.BaseFile.open(bad, tiny.n_vocab)
    path = tmp_path / "base.kld"
    tokens = _tokens(tiny, N_CHUNK * N_CTX, 6)
    _write_base(tiny, tokens, path)
    with pytest.raises(ValueError, match=rf"inconsistent vocabulary: the base file has n_vocab {tiny.n_vocab}, the model has {tiny.n_vocab + 1}"):
        kld.BaseFile.open(path, tiny.n_vocab + 1)
    short = tmp_path / "short.kld"
    short.write_bytes(path.read_bytes()[:-2])
    size = path.stat().st_size
    with pytest.raises(ValueError, match=rf"truncated: n_ctx {N_CTX}, n_vocab {tiny.n_vocab}, n_chunk {N_CHUNK} need {size} bytes, the file has {size - 2}"):
        kld.BaseFile.open(short, tiny.n_vocab)
    with kld.BaseFile.open(path, tiny.n_vocab) as base:
        other = list(tokens)
        other[40] = (other[40] + 1) % tiny.n_vocab
        with pytest.raises(ValueError, match=rf"token mismatch at position 40: .* has token {tokens[40]}, the text has {other[40]}"):
            base.check_tokens(other)
        with pytest.raises(ValueError, match=r"holds 256 tokens \(8 chunks of 32\), the text has 100"):
            base.check_tokens(tokens[:100])
        run = kld.KldRun(base)
        with pytest.raises(ValueError, match=rf"token mismatch in chunk 1 at position 17: .* has {tokens[17]}, the scored text has"):
            run(torch.zeros(15, tiny.n_vocab), torch.tensor([(tokens[17] + 1) % tiny.n_vocab] + tokens[18:32]))


def _cli(argv: list[str]):
    import argparse

    from llamapy.cli import bench as cli_bench

    ap = argparse.ArgumentParser()
    cli_bench.add_parser(ap.add_subparsers())
    return ap.parse_args(argv)


def test_cli_base_then_kl_divergence(tiny_path, tmp_path, capsys):
    f = tmp_path / "t.txt"
    f.write_text("the quick brown fox jumps over the lazy dog. " * 20)
    base = tmp_path / "base.kld"
    m = ["perplexity", "-m", str(tiny_path), "-t", "1"]
    a = _cli(m + ["-f", str(f), "-c", "32", "--kl-divergence-base", str(base)])
    assert a.fn(a) == 0 and base.is_file()
    assert "Final estimate: PPL = " in capsys.readouterr().out
    a = _cli(m + ["--kl-divergence-base", str(base), "--kl-divergence", "-c", "64"])  # -c >= the file's n_ctx
    assert a.fn(a) == 0
    out = capsys.readouterr().out
    assert kld.CHUNK_HEADER in out and "====== KL divergence statistics ======" in out
    assert re.search(r"^Same top p: +\d+\.\d{3} ± +\d\.\d{3} %$", out, re.M)
    a = _cli(m + ["-f", str(f), "--kl-divergence-base", str(base), "--kl-divergence", "-c", "32", "--exact"])
    assert a.fn(a) == 0  # -f with the same text is checked and accepted
    for argv, msg in ((["--kl-divergence", "-c", "32"], "--kl-divergence needs --kl-divergence-base FILE"),
                      (["-c", "32"], "perplexity needs -f FILE"),
                      (["--kl-divergence-base", str(base), "--kl-divergence", "-c", "16"],
                       "has been computed with n_ctx 32, while the current context is 16. Increase it with -c")):
        a = _cli(m + argv)
        with pytest.raises(ValueError, match=msg):
            a.fn(a)
