#!/usr/bin/env python3
"""llamapy vs llama.cpp on the same GGUF and the same threads, side by side in one run.

Runs llama.cpp's llama-bench, llama-batched-bench and llama-perplexity (from --llamacpp-bin, default
$HOME/.cache/llamacpp-ref/llama.cpp/build/bin) and llamapy's equivalents in this process, then
prints one table of ratios against the issue's targets:

    pp512 t/s            llamapy / llama.cpp   target >= 2
    tg128 t/s            llamapy / llama.cpp   target >= 1
    batched S_TG @ B=16  llamapy / llama.cpp   target >= 2
    perplexity           llamapy / llama.cpp   target within 1%
    weights resident     llamapy / GGUF size   target <= 1.1

and an accuracy row pair (skip with --skip-kld): llamapy with --exact weights (all dequantized to
float32: the reference) writes a --kl-divergence-base file, then llama.cpp's llama-perplexity
--kl-divergence and llamapy's default mode each score against it: "same top-1" (how often the
most likely token is the reference's) and "mean KLD" (KL(reference || model) per token).

    .venv/bin/python benchmarks/vs_llamacpp.py -m smollm2-135m -t 2
    .venv/bin/python benchmarks/vs_llamacpp.py --quick          # small sizes, minutes not tens
Not a test: it takes minutes and its numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BIN = Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin"
PROSE = [ROOT / "tests/data/prose_en.txt", ROOT / "tests/data/prose_en_2.txt"]


@dataclass(slots=True)
class Row:
    metric: str
    cpp: float | None
    py: float | None
    target: str
    kind: str = "speed"  # speed: ratio py/cpp; ppl: relative difference; mem: py / file; top: fraction, difference; kld


def _run(cmd: list[str], timeout: int) -> str:
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    print(f"  ({time.perf_counter() - t0:.1f} s, rc={p.returncode})", file=sys.stderr, flush=True)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed (rc={p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout + "\n" + p.stderr


# --- llama.cpp ----------------------------------------------------------------------------------
def cpp_bench(bin_dir: Path, model: Path, a) -> dict[str, float]:
    out = _run([str(bin_dir / "llama-bench"), "-m", str(model), "-p", str(a.pp), "-n", str(a.tg), "-t", str(a.threads),
                "-r", str(a.reps), "-o", "json"], a.timeout)
    doc = json.loads(out[out.index("["):out.rindex("]") + 1])
    res = {("pp" if d["n_gen"] == 0 else "tg"): d["avg_ts"] for d in doc}
    res["model_size"] = doc[0]["model_size"]
    return res


def cpp_batched(bin_dir: Path, model: Path, a) -> float:
    n_ctx = a.npl * (a.npp + a.ntg)
    out = _run([str(bin_dir / "llama-batched-bench"), "-m", str(model), "-c", str(n_ctx), "-b", "2048", "-ub", "512",
                "-npp", str(a.npp), "-ntg", str(a.ntg), "-npl", str(a.npl), "-kvu", "-t", str(a.threads),
                "--output-format", "jsonl"], a.timeout)
    rows = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    return float(rows[-1]["speed_tg"])


def cpp_perplexity(bin_dir: Path, model: Path, text_file: Path, a) -> float:
    out = _run([str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(text_file), "-c", str(a.ppl_ctx),
                "-t", str(a.threads)], a.timeout)
    for ln in out.splitlines():
        if "Final estimate: PPL = " in ln:
            return float(ln.split("PPL = ")[1].split()[0])
    raise RuntimeError("llama-perplexity printed no final estimate")


def cpp_kld(bin_dir: Path, model: Path, base: Path, a) -> dict[str, float]:
    """llama-perplexity --kl-divergence against llamapy's f32 base file: its "Same top p" and
    "Mean    KLD" lines."""
    out = _run([str(bin_dir / "llama-perplexity"), "-m", str(model), "--kl-divergence-base", str(base), "--kl-divergence",
                "-c", str(a.ppl_ctx), "-t", str(a.threads)], a.timeout)
    res: dict[str, float] = {}
    for ln in out.splitlines():
        if ln.startswith("Same top p:"):
            res["same_top"] = float(ln.split(":")[1].split()[0]) / 100
        elif ln.startswith("Mean    KLD:"):
            res["kld"] = float(ln.split(":")[1].split()[0])
    if len(res) != 2:
        raise RuntimeError("llama-perplexity --kl-divergence printed no 'Same top p' / 'Mean    KLD' line")
    return res


# --- llamapy ------------------------------------------------------------------------------------
def py_kld_base(model_path: Path, text_file: Path, a, base: Path) -> float:
    """The f32 reference: llamapy with every weight dequantized to float32 writes the
    --kl-divergence-base file for text_file at -c ppl_ctx.  Returns its perplexity."""
    import gc

    import torch

    from llamapy.bench import kld
    from llamapy.bench import perplexity as ppl
    from llamapy.model.model import Model

    logging.getLogger("llamapy").setLevel(logging.ERROR)
    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    model = Model.load(model_path, exact=True)
    tokens = model.tokenize(text_file.read_text(encoding="utf-8"), add_special=True)
    n_chunk = len(tokens) // a.ppl_ctx
    with kld.BaseWriter.create(base, a.ppl_ctx, model.n_vocab, tokens, n_chunk) as w:
        r = ppl.perplexity(ppl.make_context(model, a.ppl_ctx, 2048, 512, n_threads=a.threads), tokens, a.ppl_ctx, on_logits=w)
    print(f"  llamapy --exact base: PPL = {r.ppl:.4f} over {r.n_chunk} chunks -> {base} ({time.perf_counter() - t0:.1f} s)",
          file=sys.stderr, flush=True)
    del model, w
    gc.collect()
    return r.ppl


def py_all(model_path: Path, text_file: Path, a, kld_base: Path | None = None) -> dict[str, float]:
    import torch

    from llamapy import Context, ContextParams
    from llamapy.bench import batched_bench as bb
    from llamapy.bench import kld
    from llamapy.bench import llama_bench as lb
    from llamapy.bench import perplexity as ppl
    from llamapy.model.model import Model

    logging.getLogger("llamapy").setLevel(logging.ERROR)  # as llama-bench silences llama's log
    torch.set_num_threads(a.threads)
    res: dict[str, float] = {}
    p = lb.BenchParams(model=str(model_path), n_prompt=[a.pp], n_gen=[a.tg], n_threads=[a.threads], reps=a.reps)
    model = Model.load(model_path)
    res["resident"], res["file_bytes"] = model.n_bytes_resident, model.n_bytes_file
    rng = random.Random(1)
    for inst in lb.get_instances(p):
        t0 = time.perf_counter()
        r = lb.run_instance(model, inst, p, rng)
        res["pp" if inst.n_gen == 0 else "tg"] = r.avg_ts()
        print(f"  llamapy {inst.test_name}: {r.avg_ts():.2f} ± {r.stddev_ts():.2f} t/s ({time.perf_counter() - t0:.1f} s)",
              file=sys.stderr, flush=True)
    if not a.skip_batched:
        ctx = Context(model, ContextParams(n_ctx=a.npl * (a.npp + a.ntg), n_batch=2048, n_ubatch=512, n_seq_max=a.npl,
                                           kv_unified=True, n_threads=a.threads))
        rows = list(bb.run_batched_bench(ctx, [a.npp], [a.ntg], [a.npl]))
        res["batched"] = rows[-1].speed_tg
        print("  llamapy batched: " + bb.md_row(rows[-1]), file=sys.stderr, flush=True)
        del ctx
    if not a.skip_ppl or kld_base is not None:  # one run does both: the base file holds this text's tokens
        ctx = ppl.make_context(model, a.ppl_ctx, 2048, 512, n_threads=a.threads)
        tokens = model.tokenize(text_file.read_text(encoding="utf-8"), add_special=True)
        run = kld.KldRun(kld.BaseFile.open(kld_base, model.n_vocab)) if kld_base is not None else None
        try:
            r = ppl.perplexity(ctx, tokens, a.ppl_ctx, on_logits=run)
        finally:
            if run is not None:
                run.base.close()
        if not a.skip_ppl:
            res["ppl"] = r.ppl
            print(f"  llamapy PPL = {r.ppl:.4f} +/- {r.ppl_err:.5f} over {r.n_chunk} chunks", file=sys.stderr, flush=True)
        if run is not None:
            res["same_top"], res["kld"] = run.stats.same_top, run.stats.mean_kld
            print(f"  llamapy vs f32 reference: same top p {100 * run.stats.same_top:.3f} %, mean KLD {run.stats.mean_kld:.6f}",
                  file=sys.stderr, flush=True)
    return res


def _fmt(v: float | None, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "mem":
        return f"{v / 2**20:.1f} MiB"
    if kind == "top":
        return f"{100 * v:.3f}%"
    if kind == "kld":
        return f"{v:.6f}"
    return f"{v:.4f}" if kind == "ppl" else f"{v:.2f}"


def _ratio(r: Row) -> str:
    if r.cpp is None or r.py is None:
        return "-"
    if r.kind == "top":
        return f"{(r.py - r.cpp) * 100:+.2f} pt"
    if not r.cpp or (r.kind == "kld" and (r.cpp <= 0 or r.py <= 0)):
        return "-"
    return f"{(r.py / r.cpp - 1) * 100:+.2f}%" if r.kind == "ppl" else f"{r.py / r.cpp:.2f}x"


def print_table(rows: list[Row]) -> None:
    w = max(24, *(len(r.metric) for r in rows))
    print(f"| {'metric':<{w}} | {'llama.cpp':>12} | {'llamapy':>12} | {'ratio':>9} | {'target':<14} |")
    print(f"| {'-' * w} | {'-' * 11}: | {'-' * 11}: | {'-' * 8}: | {'-' * 14} |")
    for r in rows:
        print(f"| {r.metric:<{w}} | {_fmt(r.cpp, r.kind):>12} | {_fmt(r.py, r.kind):>12} | {_ratio(r):>9} | {r.target:<14} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m", help="registered name or .gguf path")
    ap.add_argument("--llamacpp-bin", type=Path, default=Path(os.environ.get("LLAMACPP_BIN", DEFAULT_BIN)))
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-p", "--pp", type=int, default=512)
    ap.add_argument("-n", "--tg", type=int, default=128)
    ap.add_argument("-npp", type=int, default=128)
    ap.add_argument("-ntg", type=int, default=128)
    ap.add_argument("-npl", type=int, default=16)
    ap.add_argument("-f", "--ppl-file", type=Path, default=None, help="text to score (default: tests/data/prose_en*.txt)")
    ap.add_argument("--ppl-ctx", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="-p 128 -n 32 -npp 32 -ntg 32 -r 1")
    ap.add_argument("--skip-batched", action="store_true")
    ap.add_argument("--skip-ppl", action="store_true")
    ap.add_argument("--skip-kld", action="store_true", help="no accuracy rows (same top-1 / mean KLD vs the f32 reference)")
    ap.add_argument("--skip-llamacpp", action="store_true", help="llamapy's numbers only")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per llama.cpp tool")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    a = ap.parse_args(argv)
    if a.quick:
        a.pp, a.tg, a.npp, a.ntg, a.reps = 128, 32, 32, 32, 1
    sys.path.insert(0, str(ROOT / "src"))
    from llamapy.registry import resolve_model

    model = Path(resolve_model(a.model))
    if a.ppl_file is None:
        tmp = Path(tempfile.mkdtemp(prefix="vs_llamacpp_")) / "prose.txt"
        tmp.write_text("".join(p.read_text(encoding="utf-8") for p in PROSE), encoding="utf-8")
        a.ppl_file = tmp
    kld_base = None
    py_ref: dict[str, float] = {}
    if not a.skip_kld:  # llamapy --exact writes the reference both programs are scored against
        kld_base = Path(tempfile.mkdtemp(prefix="vs_llamacpp_kld_")) / "f32-base.kld"
        py_ref["ppl_f32"] = py_kld_base(model, a.ppl_file, a, kld_base)
    cpp: dict[str, float] = {}
    if not a.skip_llamacpp:
        if not (a.llamacpp_bin / "llama-bench").is_file():
            raise SystemExit(f"no llama-bench in {a.llamacpp_bin}: build it (../shared/tools/build-llamacpp.sh) or pass --llamacpp-bin")
        cpp.update(cpp_bench(a.llamacpp_bin, model, a))
        if not a.skip_batched:
            cpp["batched"] = cpp_batched(a.llamacpp_bin, model, a)
        if not a.skip_ppl:
            cpp["ppl"] = cpp_perplexity(a.llamacpp_bin, model, a.ppl_file, a)
        if kld_base is not None:
            cpp.update(cpp_kld(a.llamacpp_bin, model, kld_base, a))
    py = py_all(model, a.ppl_file, a, kld_base) | py_ref
    if kld_base is not None:
        kld_base.unlink()  # ~2 bytes per vocabulary entry per scored token
    file_size = model.stat().st_size
    rows = [Row(f"pp{a.pp} t/s", cpp.get("pp"), py.get("pp"), ">= 2x"),
            Row(f"tg{a.tg} t/s", cpp.get("tg"), py.get("tg"), ">= 1x"),
            Row(f"batched S_TG B={a.npl} t/s", cpp.get("batched"), py.get("batched"), ">= 2x"),
            Row(f"perplexity -c {a.ppl_ctx}", cpp.get("ppl"), py.get("ppl"), "within 1%", "ppl"),
            Row("weights resident", float(file_size), py.get("resident"), "<= 1.1x file", "mem")]
    if not a.skip_kld:
        rows += [Row("same top-1 vs f32 reference", cpp.get("same_top"), py.get("same_top"), ">= llama.cpp", "top"),
                 Row("mean KLD vs f32 reference", cpp.get("kld"), py.get("kld"), "<= llama.cpp", "kld")]
    print(f"\nmodel: {model} ({file_size / 2**20:.1f} MiB), threads: {a.threads}\n")
    print_table(rows)
    if a.json:
        a.json.write_text(json.dumps({"model": str(model), "threads": a.threads, "llamacpp": cpp, "llamapy": py}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
