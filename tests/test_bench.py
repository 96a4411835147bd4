"""llamapy bench / batched-bench / perplexity on the tiny model: output formats carry
llama-bench's field names, every option combination runs, the batched-bench rows and N_KV follow
llama.cpp's formula, and perplexity equals an independent exp(mean NLL) over the scored halves."""
from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import math
import re
import statistics
from pathlib import Path

import pytest
import torch

from llamapy import Batch, Context, ContextParams
from llamapy.bench import batched_bench as bb
from llamapy.bench import llama_bench as lb
from llamapy.bench import perplexity as ppl
from llamapy.bench.plot import plot_ubatch
from llamapy.bench.printers import EXTRA_FIELDS, FIELDS, make_printer
from llamapy.model.model import Model

LLAMA_BENCH_CPP = Path.home() / ".cache/llamacpp-ref/llama.cpp/tools/llama-bench/llama-bench.cpp"


def _params(tiny_path, **kw) -> lb.BenchParams:
    base = dict(model=str(tiny_path), n_prompt=[8], n_gen=[2], reps=2, n_threads=[1])
    base.update(kw)
    return lb.BenchParams(**base)


@pytest.fixture(scope="module")
def results(tiny_path) -> tuple[lb.BenchParams, list[lb.TestResult]]:
    p = _params(tiny_path, n_pg=[(4, 2)], n_ubatch=[4, 8])
    return p, lb.run_bench(p)


def _render(fmt: str, p, rs) -> str:
    out = io.StringIO()
    pr = make_printer(fmt, out)
    pr.header(p)
    for r in rs:
        pr.test(r)
    pr.footer()
    return out.getvalue()


def test_fields_are_llama_benchs():
    if not LLAMA_BENCH_CPP.is_file():
        pytest.skip("llama.cpp sources not present")
    src = LLAMA_BENCH_CPP.read_text()
    body = src[src.index("get_fields() {"):]
    body = body[body.index("{", body.index("fields =")):body.index("};")]
    assert tuple(re.findall(r'"(\w+)"', body)) == FIELDS


def test_json_and_jsonl_keys(results):
    p, rs = results
    want = list(FIELDS + EXTRA_FIELDS) + ["samples_ns", "samples_ts"]
    doc = json.loads(_render("json", p, rs))
    assert len(doc) == len(rs) and all(list(d) == want for d in doc)
    lines = _render("jsonl", p, rs).splitlines()
    assert [list(json.loads(x)) for x in lines] == [want] * len(rs)
    d = doc[0]
    assert (d["n_prompt"], d["n_gen"], d["n_depth"], d["n_ubatch"]) == (8, 0, 0, 4)
    assert isinstance(d["cpu_strict"], bool) and isinstance(d["avg_ts"], float)
    assert len(d["samples_ns"]) == len(d["samples_ts"]) == p.reps
    assert d["avg_ts"] == pytest.approx(statistics.mean(d["samples_ts"]), rel=1e-4)
    assert d["stddev_ts"] == pytest.approx(statistics.stdev(d["samples_ts"]), rel=1e-3, abs=1e-4)
    assert d["samples_ts"][0] == pytest.approx(1e9 * 8 / d["samples_ns"][0], rel=1e-4)


def test_csv(results):
    p, rs = results
    rows = list(csv.reader(io.StringIO(_render("csv", p, rs))))
    assert tuple(rows[0]) == FIELDS + EXTRA_FIELDS and len(rows) == 1 + len(rs)
    assert all(len(r) == len(rows[0]) for r in rows)


def test_markdown_shape_and_test_names(results):
    p, rs = results
    lines = _render("md", p, rs).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head == ["model", "size", "params", "backend", "threads", "n_ubatch", "test", "t/s", "compute MiB"]
    assert set(lines[1].replace("|", "").split()) <= {"-" * n + e for n in range(1, 40) for e in ("", ":")}
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:2 + len(rs)]]
    assert all(len(r) == len(head) for r in rows)
    assert [r[6] for r in rows] == ["pp8", "tg2", "pp4+tg2"] * 2
    assert [r[5] for r in rows] == ["4"] * 3 + ["8"] * 3
    assert all(re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", r[7]) for r in rows)
    assert lines[-1].startswith("build:")
    # defaults only: no option columns
    head2 = _render("md", _params("x"), []).splitlines()[0]
    assert [c.strip() for c in head2.strip("|").split("|")] == ["model", "size", "params", "backend", "threads", "test", "t/s", "compute MiB"]


def test_every_combination_runs(tiny_path):
    p = _params(tiny_path, n_prompt=[8, 16], n_gen=[0], reps=1, n_batch=[8, 16], n_ubatch=[4, 8],
                type_k=["f16", "f32"], flash_attn=["on", "off"], n_ctx=[0, 64], no_warmup=True)
    rs = lb.run_bench(p)
    got = [(r.inst.n_batch, r.inst.n_ubatch, r.inst.type_k, r.inst.flash_attn, r.inst.n_ctx, r.inst.n_prompt) for r in rs]
    assert got == list(itertools.product([8, 16], [4, 8], ["f16", "f32"], ["on", "off"], [0, 64], [8, 16]))
    assert {r.n_ctx for r in rs if r.inst.n_ctx == 64} == {256}  # resolved (padded) cells are reported


def test_prompt_in_n_batch_chunks_and_gen_one_token_per_decode(tiny):
    import random

    ctx = Context(tiny, ContextParams(n_ctx=256, n_batch=16, n_ubatch=8))
    lb.test_prompt(ctx, 40, 16, random.Random(0))
    assert ctx.stats.n_decode_calls == 3 and ctx.stats.ubatches_per_decode == [2, 2, 1]
    assert ctx.memory.seq_pos_max(0) == 39
    ctx.stats.reset()
    lb.test_gen(ctx, 5, random.Random(0))
    assert ctx.stats.n_decode_calls == 5 and ctx.stats.n_tokens == 5 and ctx.memory.seq_pos_max(0) == 44


def test_stdev_is_sample_stdev():
    v = [3.0, 5.0, 11.0]
    assert lb._stdev(v) == pytest.approx(statistics.stdev(v))
    assert lb._stdev([4.0]) == 0.0


def test_plot_is_png(tiny_path, tmp_path):
    rs = lb.run_bench(_params(tiny_path, n_gen=[0], n_ubatch=[4, 8, 16], reps=1))
    out = plot_ubatch(rs, tmp_path / "ub.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    with pytest.raises(ValueError, match="-p"):
        plot_ubatch([r for r in rs if r.inst.n_prompt == 0], tmp_path / "none.png")


def _cli(argv: list[str]) -> argparse.Namespace:
    from llamapy.cli import bench as cli_bench

    ap = argparse.ArgumentParser()
    cli_bench.add_parser(ap.add_subparsers(dest="cmd"))
    return ap.parse_args(argv)


def test_cli_bench_jsonl_and_plot(tiny_path, tmp_path, capsys):
    png = tmp_path / "p.png"
    a = _cli(["bench", "-m", str(tiny_path), "-p", "8", "-n", "0", "-ub", "4,8", "-r", "1", "-t", "1", "-o", "jsonl", "--plot", str(png)])
    assert a.fn(a) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["n_prompt"], r["n_ubatch"]) for r in rows] == [(8, 4), (8, 8)]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_bench_speculative_tg(tiny_path, capsys):
    """--spec-type: the tg test generates greedily with drafts; the json rows carry the draft
    counts and the ubatches per verification (a 4-token draft + its token over -ub 2: 3)."""
    a = _cli(["bench", "-m", str(tiny_path), "-p", "0", "-n", "24", "-ub", "2,64", "-r", "2", "-t", "1", "-o", "json",
              "--spec-type", "draft-simple", "-md", str(tiny_path), "--spec-draft-n-max", "4"])
    assert a.fn(a) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["spec_type"] for r in rows] == ["draft-simple"] * 2
    by_ub = {r["n_ubatch"]: r for r in rows}
    for r in rows:  # the draft is the target itself: drafts are accepted
        assert r["n_drafted"] >= r["n_accepted"] > 0 and r["n_verify"] > 0 and r["avg_ts"] > 0
    assert by_ub[64]["ubatches_per_verify"] == 1.0
    assert by_ub[2]["ubatches_per_verify"] > 1.0  # a verification of n rows takes ceil(n / 2)


def test_cli_batched_bench_speculative(tiny_path, capsys):
    """batched-bench --spec-type: each sequence a server slot that drafts; the rows carry the
    draft counts, and with -ub 2 the generation steps take more than one ubatch."""
    a = _cli(["batched-bench", "-m", str(tiny_path), "-c", "512", "-npp", "8", "-ntg", "12", "-npl", "1,3", "-ub", "2",
              "-b", "64", "-t", "1", "--output-format", "jsonl", "--spec-type", "draft-simple", "-md", str(tiny_path),
              "--spec-draft-n-max", "3"])
    assert a.fn(a) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert [(r["pl"], r["spec_type"]) for r in rows] == [(1, "draft-simple"), (3, "draft-simple")]
    for r in rows:
        assert r["n_drafted"] >= r["n_accepted"] > 0 and r["speed_tg"] > 0 and r["ubatches_per_step"] > 1.0


# --- batched-bench ----------------------------------------------------------------------------
@pytest.mark.parametrize("pps", [False, True])
def test_batched_bench_rows_and_n_kv(tiny, pps):
    ctx = Context(tiny, ContextParams(n_ctx=256, n_batch=64, n_ubatch=32, n_seq_max=4, kv_unified=True))
    npp, ntg, npl = [8, 12], [3], [1, 2, 4]
    rows = list(bb.run_batched_bench(ctx, npp, ntg, npl, is_pp_shared=pps))
    assert [(r.pp, r.tg, r.pl) for r in rows] == list(itertools.product(npp, ntg, npl))
    for r in rows:
        assert r.n_kv == (r.pp + r.pl * r.tg if pps else r.pl * (r.pp + r.tg))
        assert r.speed_tg == pytest.approx(r.pl * r.tg / r.t_tg, rel=1e-6)
        assert r.t == pytest.approx(r.t_pp + r.t_tg)
    # the last point left exactly its cells in the cache: pp prompt cells (shared or not) + pl*tg
    assert ctx.memory.n_used() == rows[-1].n_kv


def test_batched_bench_decode_step_is_one_batch_of_b_tokens(tiny):
    import random

    ctx = Context(tiny, ContextParams(n_ctx=256, n_batch=64, n_ubatch=32, n_seq_max=4, kv_unified=True))
    bb.run_one(ctx, 8, 5, 4, False, False, random.Random(0))
    # 1 prompt decode (32 tokens) + 5 steps of 4 tokens
    assert ctx.stats.ubatches_per_decode[-6:] == [1] * 6
    assert ctx.stats.n_decode_calls == 6 and ctx.stats.n_tokens == 32 + 20
    assert all(ctx.memory.seq_pos_max(s) == 12 for s in range(4))


def test_batched_bench_skips_points_that_do_not_fit(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=256, n_batch=256, n_ubatch=64, n_seq_max=4, kv_unified=True))
    rows = list(bb.run_batched_bench(ctx, [60], [8], [1, 4]))
    assert [r.pl for r in rows] == [1]  # 4 * 68 = 272 > 256 cells


def test_batched_bench_jsonl_keys(tiny):
    ctx = Context(tiny, ContextParams(n_ctx=256, n_seq_max=2, kv_unified=True))
    r = next(bb.run_batched_bench(ctx, [4], [2], [2]))
    d = json.loads(bb.jsonl_row(ctx, r, False, 1))
    assert list(d)[-10:] == ["pp", "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed"]
    assert bb.md_row(r).count("|") == 11


# --- perplexity -------------------------------------------------------------------------------
def _reference_ppl(model: Model, tokens: list[int], n_ctx: int, n_chunk: int) -> float:
    """Each chunk alone in a fresh context, all logits, NLL of the second half computed with
    a plain float64 log-softmax."""
    tok = model.tokenizer
    nll, count = 0.0, 0
    first = n_ctx // 2
    for c in range(n_chunk):
        ids = tokens[c * n_ctx:(c + 1) * n_ctx]
        if tok.add_bos:
            ids = [tok.bos] + ids[1:]
        ctx = Context(model, ContextParams(n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx))
        b = Batch()
        for i, t in enumerate(ids):
            b.add(t, i, (0,), logits=True)
        ctx.decode(b)
        lg = ctx.get_logits().double()  # [n_ctx, n_vocab]
        for i in range(first, n_ctx - 1):
            row = lg[i]
            nll += float(torch.logsumexp(row, 0) - row[ids[i + 1]])
            count += 1
    return math.exp(nll / count)


@pytest.fixture(scope="module")
def tiny_bos(tiny_path) -> Model:
    m = Model.load(tiny_path)
    m.tokenizer.vocab.add_bos = True  # a private copy: exercise the BOS replacement
    return m


@pytest.mark.parametrize("n_batch", [96, 32, 16])  # 3 chunks per decode; 1 per decode; 2 decodes per chunk
@pytest.mark.parametrize("bos", [False, True])
def test_perplexity_equals_direct_nll(tiny, tiny_bos, n_batch, bos):
    model = tiny_bos if bos else tiny
    n_ctx = 32
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, model.n_vocab, (4 * n_ctx + 7,), generator=g).tolist()
    ctx = ppl.make_context(model, n_ctx, n_batch, n_ubatch=16)
    seen: list[tuple[int, float]] = []
    res = ppl.perplexity(ctx, tokens, n_ctx, on_chunk=lambda i, v: seen.append((i, v)))
    assert res.n_chunk == 4 and res.count == 4 * (n_ctx - n_ctx // 2 - 1)
    assert [i for i, _ in seen] == [1, 2, 3, 4] and seen[-1][1] == res.ppl
    assert res.ppl == pytest.approx(_reference_ppl(model, tokens, n_ctx, 4), rel=1e-4)
    assert ppl.perplexity(ppl.make_context(model, n_ctx, n_batch, 16), tokens, n_ctx, n_chunks=2).running == pytest.approx(res.running[:2], rel=1e-4)


def test_perplexity_bos_changes_result(tiny, tiny_bos):
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, tiny.n_vocab, (64,), generator=g).tolist()
    a = ppl.perplexity(ppl.make_context(tiny, 16, 32), tokens, 16).ppl
    b = ppl.perplexity(ppl.make_context(tiny_bos, 16, 32), tokens, 16).ppl
    assert a != b


def test_perplexity_errors(tiny):
    with pytest.raises(ValueError, match="needs at least 64 tokens"):
        ppl.perplexity(ppl.make_context(tiny, 32, 64), [1] * 40, 32)
    with pytest.raises(ValueError, match="-c > 0"):
        ppl.perplexity_layout(0, 48)
    # llama-perplexity's main(): n_seq = n_batch / n_ctx, then n_batch clamped to n_seq * n_ctx
    assert [ppl.perplexity_layout(32, b) for b in (16, 48, 100, 2048)] == [(1, 16), (1, 32), (3, 96), (64, 2048)]


def test_cli_perplexity_output(tiny_path, tmp_path, capsys):
    f = tmp_path / "t.txt"
    f.write_text("the quick brown fox jumps over the lazy dog. " * 20)
    a = _cli(["perplexity", "-m", str(tiny_path), "-f", str(f), "-c", "64", "-b", "128", "--chunks", "3"])
    assert a.fn(a) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"\[1\][\d.]+,\[2\][\d.]+,\[3\][\d.]+,\n", out.splitlines(keepends=True)[0])
    assert re.search(r"^Final estimate: PPL = \d+\.\d{4} \+/- \d+\.\d{5}$", out, re.M)


def test_cli_batched_bench_md(tiny_path, capsys):
    """One KV stream per sequence by default, as llama-batched-bench (-kvu: one unified cache)."""
    a = _cli(["batched-bench", "-m", str(tiny_path), "-c", "256", "-npp", "8,16", "-ntg", "2", "-npl", "1,3", "-t", "1"])
    assert a.kv_unified is False
    assert _cli(["batched-bench", "-m", str(tiny_path), "-kvu"]).kv_unified is True
    assert a.fn(a) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("|")]
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    assert [(r[0], r[2], r[3]) for r in rows] == [("8", "1", "10"), ("8", "3", "30"), ("16", "1", "18"), ("16", "3", "54")]


def test_nkvo_is_swept_and_reported(tiny_path):
    """-nkvo 0,1: both instances run; md shows llama-bench's nkvo column, json its bool."""
    p = _params(tiny_path, n_prompt=[8], n_gen=[0], reps=1, no_kv_offload=[False, True], no_warmup=True)
    rs = lb.run_bench(p)
    assert [r.inst.no_kv_offload for r in rs] == [False, True]
    lines = _render("md", p, rs).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert "nkvo" in head
    assert [ln.strip("|").split("|")[head.index("nkvo")].strip() for ln in lines[2:4]] == ["0", "1"]
    assert [json.loads(ln)["no_kv_offload"] for ln in _render("jsonl", p, rs).splitlines()] == [False, True]
