"""llama.cpp's side of vs_llamacpp.py: its own llama-bench, llama-batched-bench, llama-perplexity
and llama-completion from one build folder (one ISA level), each a child process, parsed from
their machine-readable output."""
from __future__ import annotations

import json
from pathlib import Path

from proc import run
from sizes import Sizes


def repack_args(s: Sizes, bench: bool = False) -> list[str]:
    """llama.cpp's flag that turns its repacked weight layouts off, when s.no_repack."""
    return (["--repack", "0"] if bench else ["--no-repack"]) if s.no_repack else []


def bench(bin_dir: Path, model: Path, s: Sizes) -> dict[str, float]:
    """llama-bench -o json: pp and tg t/s, and model_size (tensor bytes)."""
    d = run([str(bin_dir / "llama-bench"), "-m", str(model), "-p", str(s.pp), "-n", str(s.tg), "-t", str(s.threads),
             "-r", str(s.reps), "-o", "json", *repack_args(s, bench=True)], s.timeout)
    doc = json.loads(d.stdout[d.stdout.index("["):d.stdout.rindex("]") + 1])
    res = {("pp" if x["n_gen"] == 0 else "tg"): float(x["avg_ts"]) for x in doc}
    res["model_size"] = float(doc[0]["model_size"])
    return res


def batched(bin_dir: Path, model: Path, s: Sizes) -> float:
    """llama-batched-bench with a unified cache: S_TG t/s at B = npl."""
    d = run([str(bin_dir / "llama-batched-bench"), "-m", str(model), "-c", str(s.npl * (s.npp + s.ntg)), "-b", "2048",
             "-ub", "512", "-npp", str(s.npp), "-ntg", str(s.ntg), "-npl", str(s.npl), "-kvu", "-t", str(s.threads),
             "--output-format", "jsonl", *repack_args(s)], s.timeout)
    rows = [json.loads(ln) for ln in d.out.splitlines() if ln.startswith("{")]
    if not rows:
        raise RuntimeError("llama-batched-bench printed no jsonl row")
    return float(rows[-1]["speed_tg"])


def perplexity(bin_dir: Path, model: Path, text: Path, s: Sizes) -> float:
    d = run([str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(text), "-c", str(s.ppl_ctx),
             "-t", str(s.threads), "--chunks", str(s.ppl_chunks), *repack_args(s)], s.timeout)
    for ln in d.out.splitlines():
        if "Final estimate: PPL = " in ln:
            return float(ln.split("PPL = ")[1].split()[0])
    raise RuntimeError("llama-perplexity printed no final estimate")


def kld(bin_dir: Path, model: Path, base: Path, s: Sizes) -> dict[str, float]:
    """llama-perplexity --kl-divergence against llamapy's f32 base file: "Same top p", "Mean    KLD"."""
    d = run([str(bin_dir / "llama-perplexity"), "-m", str(model), "--kl-divergence-base", str(base), "--kl-divergence",
             "-c", str(s.ppl_ctx), "-t", str(s.threads), *repack_args(s)], s.timeout)
    res: dict[str, float] = {}
    for ln in d.out.splitlines():
        if ln.startswith("Same top p:"):
            res["same_top"] = float(ln.split(":")[1].split()[0]) / 100
        elif ln.startswith("Mean    KLD:"):
            res["kld"] = float(ln.split(":")[1].split()[0])
    if len(res) != 2:
        raise RuntimeError("llama-perplexity --kl-divergence printed no 'Same top p' / 'Mean    KLD' line")
    return res


def run_peak(bin_dir: Path, model: Path, s: Sizes, prompt: str, n: int = 4) -> tuple[float, str]:
    """Peak RSS (bytes) of a whole `llama-completion -n 4` process (load, prompt, 4 tokens), and
    the CPU features its system_info line says the build uses ("AVX2 F16C FMA ...")."""
    d = run([str(bin_dir / "llama-completion"), "-m", str(model), "-p", prompt, "-n", str(n), "-c", str(s.run_ctx),
             "-t", str(s.threads), "-no-cnv", "--temp", "0", *repack_args(s)], s.timeout)
    return float(d.maxrss), system_info(d.out)


def system_info(out: str) -> str:
    """llama.cpp's `system_info: ... | CPU : SSE3 = 1 | AVX2 = 1 | ...` -> "SSE3 SSSE3 AVX AVX2 ..."."""
    for ln in out.splitlines():
        if "system_info:" in ln and "CPU :" in ln:
            feats = [k.strip() for k, _, v in (x.partition("=") for x in ln.split("CPU :", 1)[1].split("|"))
                     if v.strip() == "1"]
            return " ".join(feats)
    return ""
