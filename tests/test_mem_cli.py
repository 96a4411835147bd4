"""`llamapy mem`: the seed's worked example from typed hyperparameters, llama.cpp's lines from a
real header, the per-slot explanation, clamps, JSON and the --fit table."""
from __future__ import annotations

import argparse
import json

import pytest

from llamapy.cli import mem as cli_mem


def mem(capsys, *argv: str) -> str:
    ap = argparse.ArgumentParser(prog="llamapy")
    cli_mem.add_parser(ap.add_subparsers(dest="cmd"))
    a = ap.parse_args(["mem", *argv])
    assert a.fn(a) == 0
    return capsys.readouterr().out


EIGHT_B = ("--n-layer", "32", "--n-embd", "4096", "--n-head", "32", "--n-head-kv", "8")


@pytest.mark.parametrize("c,mib", [("8192", 1024), ("32768", 4096), ("131072", 16384)])
def test_worked_example(capsys, c, mib):
    out = mem(capsys, *EIGHT_B, "-c", c)
    assert "per token, per layer: K 1024 x f16 = 2048 bytes + V 1024 x f16 = 2048 bytes = 4096 bytes (4 KiB)" in out
    assert "per token, 32 layers: 128 KiB" in out
    assert f"llama_kv_cache: size = {mib:7.2f} MiB ({int(c):6d} cells,  32 layers,  1/1 seqs)" in out
    assert "GQA ratio: n_head / n_head_kv = 32 / 8 = 4" in out
    no_gqa = mem(capsys, "--n-layer", "32", "--n-embd", "4096", "--n-head", "32", "-c", c)
    assert f"size = {4 * mib:7.2f} MiB" in no_gqa


def test_per_slot_context(capsys):
    out = mem(capsys, *EIGHT_B, "-c", "32768", "-np", "4")
    assert "each of the 4 sequences gets 8192 tokens (-c 32768 / -np 4" in out
    assert "(  8192 cells,  32 layers,  4/4 seqs)" in out
    uni = mem(capsys, *EIGHT_B, "-c", "32768", "-np", "4", "--kv-unified")
    assert "up to 32768 tokens each" in uni and "( 32768 cells,  32 layers,  4/4 seqs)" in uni


def test_clamps_are_shown(capsys):
    out = mem(capsys, *EIGHT_B, "-c", "1000", "-b", "4096", "-ub", "2048")
    assert "clamp: n_ctx (1000) padded up to 1024" in out
    assert "clamp: n_batch (-b 4096) > n_ctx (1024): n_batch clamped to 1024" in out
    assert "clamps: none applied" in mem(capsys, *EIGHT_B, "-c", "8192")


def test_real_header_q8_0(capsys, smollm2_path):
    out = mem(capsys, "-m", str(smollm2_path), "-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0")
    assert "llama_kv_cache: size =   95.62 MiB (  8192 cells,  30 layers,  1/1 seqs), K (q8_0):   47.81 MiB, V (q8_0):   47.81 MiB" in out
    assert "output buffer size =     0.19 MiB" in out
    assert "compute buffer size =" in out and "result_output (logits)" in out


def test_gemma3_two_caches(capsys, gemma3_path):
    out = mem(capsys, "-m", str(gemma3_path), "-c", "8192")
    assert "llama_kv_cache: size =   24.00 MiB (  8192 cells,   3 layers,  1/1 seqs)" in out
    assert "llama_kv_cache: size =   15.00 MiB (  1024 cells,  15 layers,  1/1 seqs)" in out
    full = mem(capsys, "-m", str(gemma3_path), "-c", "8192", "--swa-full")
    assert "size =  120.00 MiB (  8192 cells,  15 layers" in full


def test_json(capsys):
    d = json.loads(mem(capsys, *EIGHT_B, "-c", "8192", "--json"))
    assert d["buffers"]["kv_k"] == d["buffers"]["kv_v"] == 512 * 2**20
    assert d["caches"][0]["bytes_per_token"] == 128 * 1024 and d["gqa_ratio"] == 4
    assert d["cparams"]["n_ctx"] == 8192 and d["total"] == sum(d["buffers"].values())


def test_budget_verdict_and_fitting(capsys):
    out = mem(capsys, *EIGHT_B, "-c", "32768", "--mem-budget", "2048")
    assert "does NOT fit: -c 32768 needs" in out
    fitted = mem(capsys, *EIGHT_B, "--mem-budget", "6000", "-fa", "on")
    assert "clamp: context size reduced from 131072 to" in fitted


def test_fit_table(capsys):
    d = json.loads(mem(capsys, *EIGHT_B, "--fit", "--mem-budget", "8192", "-fa", "on", "--json"))
    rows = {(r["np"], r["ub"], r["type"]): r for r in d["rows"]}
    assert set(rows) >= {(1, 512, "f16"), (4, 512, "q8_0"), (1, 512, "q4_0")}
    f16, q8, q4 = (rows[(1, 512, t)]["max_ctx"] for t in ("f16", "q8_0", "q4_0"))
    assert 0 < f16 < q8 < q4 and f16 % 256 == 0
    assert rows[(4, 512, "f16")]["per_seq"] == rows[(4, 512, "f16")]["max_ctx"] // 4
    text = mem(capsys, *EIGHT_B, "--fit", "--mem-budget", "8192")
    assert "largest -c that fits 8192.00 MiB" in text


def test_missing_hyperparameters_named(capsys):
    ap = argparse.ArgumentParser(prog="llamapy")
    cli_mem.add_parser(ap.add_subparsers(dest="cmd"))
    a = ap.parse_args(["mem", "--n-layer", "32"])
    with pytest.raises(ValueError, match="--n-embd, --n-head"):
        a.fn(a)
