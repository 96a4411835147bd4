"""The command line as a user runs it: a subprocess, real model, llama.cpp's flags."""
from __future__ import annotations

import subprocess
import sys

import pytest


def llamapy(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamapy", *args], capture_output=True, text=True, timeout=timeout)


def test_run_continues_with_paris(smollm2_path):
    r = llamapy("run", "-m", str(smollm2_path), "-p", "The capital of France is", "-n", "16", "--temp", "0", "-c", "2048")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The capital of France is")
    assert "Paris" in r.stdout[len("The capital of France is"):]
    # llama.cpp's context lines on stderr
    assert "llama_context: n_ctx                 = 2048" in r.stderr
    assert "llama_kv_cache: size =   45.00 MiB (  2048 cells,  30 layers,  1/1 seqs), K (f16):   22.50 MiB, V (f16):   22.50 MiB" in r.stderr
    assert "eval time" in r.stderr


def test_default_context_is_trained_context_180_mib(smollm2_path):
    r = llamapy("run", "-m", str(smollm2_path), "-p", "Hi", "-n", "1", "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert "llama_kv_cache: size =  180.00 MiB (  8192 cells,  30 layers,  1/1 seqs), K (f16):   90.00 MiB, V (f16):   90.00 MiB" in r.stderr


def test_tokenize_prints_ids(smollm2_path):
    r = llamapy("tokenize", "-m", str(smollm2_path), "-p", "The capital of France is Paris.", "--ids")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[504, 3575, 282, 4649, 314, 7042, 30]"  # llama-tokenize's ids


def test_missing_model_is_one_line_error(tmp_path):
    r = llamapy("run", "-m", str(tmp_path / "nope.gguf"), "-p", "x", "-n", "1")
    assert r.returncode != 0
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "nope.gguf" in err[0], r.stderr


def test_unsupported_architecture_is_one_line_error(tmp_path):
    from tiny_model import write_tiny_llama

    p = write_tiny_llama(tmp_path / "mamba.gguf", arch="mamba")
    r = llamapy("run", "-m", str(p), "-p", "x", "-n", "1")
    assert r.returncode != 0
    assert "unsupported model architecture 'mamba'" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_flag_value_names_the_flag(smollm2_path):
    r = llamapy("run", "-m", str(smollm2_path), "-p", "x", "-n", "1", "-ctk", "q3_k")
    assert r.returncode != 0
    assert "-ctk" in r.stderr and "q3_k" in r.stderr and "Traceback" not in r.stderr


def test_pull_list():
    r = llamapy("pull", "--list")
    assert r.returncode == 0
    assert "smollm2-135m" in r.stdout and "gemma3-270m" in r.stdout


def test_chat_uses_template_and_answers(smollm2_path):
    r = subprocess.run(
        [sys.executable, "-m", "llamapy", "chat", "-m", str(smollm2_path), "--temp", "0", "-n", "24", "-c", "1024"],
        # (SmolLM2 135M Q4_1 answers "What is the capital of France?" with "L'Étoile, la Marseillaise..."
        # where x is rounded as llama.cpp rounds it, ggml's Q8_1: llama-completion's own greedy reply
        # on an AMD Zen 3; this wording it answers at every level, int16 (scalar) and int8 (avx2))
        input="Name the capital of France.\nAnd of Italy?\n",
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    replies = [x for x in r.stdout.split("> ") if x.strip()]
    assert len(replies) == 2, r.stdout
    assert "Paris" in replies[0]
    assert "Rome" in replies[1]  # the second turn saw the first (prefix kept in the cache)


def test_llamacpp_short_flags_parse():
    """llama.cpp's short spellings a user types from its docs: -kvu (--kv-unified), -np, -ub."""
    from llamapy.cli import build_parser

    a = build_parser().parse_args(["serve", "-kvu", "-np", "4", "-ub", "64"])
    assert a.kv_unified is True and a.parallel == 4 and a.ubatch_size == 64
    assert build_parser().parse_args(["serve"]).kv_unified is False
    assert build_parser().parse_args(["batched-bench", "-kvu", "-npl", "2,4"]).kv_unified is True


def test_gpu_layers_flag_reads_as_llamacpp(capsys):
    """-ngl / --gpu-layers / --n-gpu-layers (llama.cpp's docs pass `-ngl 99` everywhere; argparse
    used to read it as `-n gl`): 0 keeps the model on the CPU; a layer count without a usable
    GPU is ignored with llama.cpp's warning, once; a bad value names the flag."""
    import torch

    from llamapy.cli import build_parser
    from llamapy.cli.args import ctx_params as _ctx_params, resolve_device as _device

    p = build_parser()
    assert p.parse_args(["run", "-ngl", "99"]).n_gpu_layers == 99
    assert p.parse_args(["serve", "--n-gpu-layers", "all"]).n_gpu_layers == "all"
    assert p.parse_args(["bench", "-ngl", "0"]).n_gpu_layers == 0
    assert p.parse_args(["run"]).n_gpu_layers == "auto"
    assert _device(p.parse_args(["run", "-ngl", "0"])) == "cpu"
    assert _device(p.parse_args(["run", "-ngl", "0", "--device", "cuda"])) == "cuda"  # --device decides
    capsys.readouterr()
    a = p.parse_args(["run", "-ngl", "99"])
    assert _device(a) == "auto" and _ctx_params(a).device == "auto"
    warned = capsys.readouterr().err.count("no usable GPU found, --gpu-layers option will be ignored")
    assert warned == (0 if torch.cuda.is_available() else 1)
    with pytest.raises(SystemExit):
        p.parse_args(["run", "-ngl", "x"])
    assert "-ngl/--gpu-layers/--n-gpu-layers: expected a layer count >= 0, auto or all, got 'x'" in capsys.readouterr().err


def test_llamacpp_flags_llamapy_lacks_are_named(capsys):
    """A llama.cpp flag llamapy does not read is named as unknown, not split into a short option
    and a glued value (`-cnv` was `-c nv`: "invalid int value: 'nv'"; `-mg 0` loaded a model
    named "g"); a number glued to a short option still reads (`-n4`), and `-no-cnv` is accepted
    (run never holds a conversation)."""
    from llamapy.cli import build_parser

    p = build_parser()
    assert p.parse_args(["run", "-n4", "-c2048"]).n_predict == 4
    assert p.parse_args(["run", "-no-cnv"]).no_conversation is True
    for flag in (["-cnv"], ["-mg", "0"], ["-st"], ["-sm", "none"]):
        with pytest.raises(SystemExit):
            p.parse_args(["run", *flag])
        err = capsys.readouterr().err
        assert f"unrecognized arguments: {' '.join(flag)}" in err and "invalid" not in err, err
