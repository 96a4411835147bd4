#!/usr/bin/env python3
"""llamapy vs llama.cpp on the same GGUF, the same threads and the same ISA level, side by side.

For each --isa level (native | avx2 | avx512 | scalar; a comma list runs several) it uses
llama.cpp's build of that level (build-llamacpp.sh's folder: build/ for native, build-avx2/, ...;
--llamacpp-bin overrides) and runs llamapy in child processes under isa_env.py's environment
(LLAMAPY_CPU_ISA for its kernels, ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA /
MKL_ENABLE_INSTRUCTIONS for PyTorch's), checking that the kernels ran at that level.  For each
model (-m, repeatable; default SmolLM2 Q4_1 and Gemma 3 Q4_K_M) it measures:

    pp512, tg128 t/s           llama-bench vs llamapy's llama-bench       target >= 2x, >= 1.2x (*)
    batched S_TG, B=16         llama-batched-bench -npp 128 -ntg 128 -kvu  target >= 2x (*)
    perplexity -c 128          llama-perplexity on tests/data/prose_en*    target within 1%
    weights resident           llamapy's kept weights / the GGUF file      target <= 1.1x
    load RSS growth, peak      Model.load in a fresh process (tests/load_probe.py): VmRSS growth
                               <= 1.1x file, VmHWM <= 1.1x file + 64 MiB
    peak RSS of `run -n 4`     llama-completion vs `llamapy run`, whole process (no target)
    server (--server)          server_load.py: 32 streaming requests, 8 in flight, -c 8192 -np 8:
                               tokens/s >= 1.5x llama-server's, TTFT p50 <= llama-server's
    same top-1, mean KLD       (--kld) both scored against llamapy's f32 (--exact) logits

(*) the targets of a model under 1024 wide (SmolLM2, Gemma 3 270M); a wider dense one (the
1B-8B shapes, benchmarks/shapes.py) >= 1.5x, >= 1.0x, >= 1.5x; a MoE (expert_count > 0)
pp >= 1.2x, tg >= 1.0x, no B=16 target (issue 47's rows).

It prints one markdown table per level, titled with the CPU model and the level; --json FILE
keeps every raw number.  A step that fails is named under its table and leaves "-" in its row.

    .venv/bin/python benchmarks/vs_llamacpp.py -t 2 --server                   # native, both models
    .venv/bin/python benchmarks/vs_llamacpp.py -t 2 --server --isa native,avx2 --json out.json
    .venv/bin/python benchmarks/vs_llamacpp.py -t 2 --rounds 3 --isa avx2   # speed rows: medians of 3 alternating rounds
    .venv/bin/python benchmarks/vs_llamacpp.py -t 2 --quick --server -m smollm2-135m   # smoke run
Not a test: it takes minutes per model and level, and its numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

import cpp_side
import server_load
from isa_env import LEVELS, cpu_model, isa_env, llamacpp_bin
from proc import run
from report import Row, markdown
from sizes import Sizes

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
PROSE = sorted((ROOT / "tests/data").glob("prose_en*.txt"))
LOAD_PROBE = ROOT / "tests/load_probe.py"
DEFAULT_MODELS = ("smollm2-135m", "gemma3-270m")
RUN_PROMPT = "The capital of France is"
MiB = 1024 * 1024


@dataclass(slots=True)
class ModelRun:
    """Every number measured for one model at one level, and what failed."""

    name: str
    path: Path
    cpp: dict[str, float | None] = field(default_factory=dict)
    cpp_features: str = ""  # llama.cpp's system_info CPU features, e.g. "SSE3 SSSE3 AVX AVX2 F16C FMA BMI2 ..."
    py: dict = field(default_factory=dict)
    server: dict[str, dict] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def attempt(self, what: str, fn):
        """fn(); on failure the error is kept (named) and None returned: the run goes on."""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            msg = f"{self.name}: {what}: {type(e).__name__}: {str(e).strip()[-1500:]}"
            print("  FAILED " + msg, file=sys.stderr, flush=True)
            if not isinstance(e, RuntimeError):
                traceback.print_exc()
            self.errors.append(msg)
            return None


def label(name: str, path: Path) -> str:
    """"smollm2-135m Q4_1": the name given and the quant type the file name ends with."""
    m = re.search(r"(?i)[.\-_]((?:iq|q)\d(?:_[a-z0-9]+)*|bf16|f16|f32)$", path.stem)
    q = m.group(1).upper() if m else ""
    return f"{Path(name).stem if name.endswith('.gguf') else name} {q}".strip()


def py_child(what: str, model: Path, text: Path, s: Sizes, env: dict[str, str], *extra: str) -> dict:
    """py_side.py in a child process under the level's environment: its RESULT line."""
    d = run([sys.executable, str(HERE / "py_side.py"), what, str(model), str(text), s.to_json(), *extra], s.timeout, env)
    for ln in reversed(d.stdout.splitlines()):
        if ln.startswith("RESULT "):
            return json.loads(ln[7:])
    raise RuntimeError(f"py_side.py {what} printed no RESULT line:\n{d.out[-2000:]}")


def py_load(model: Path, s: Sizes, env: dict[str, str]) -> dict:
    """tests/load_probe.py: Model.load's VmRSS growth and VmHWM peak, in a fresh process
    (freed buffers leave RSS at once, as test_load_memory.py runs it)."""
    d = run([sys.executable, str(LOAD_PROBE), str(model)], s.timeout, env | {"MALLOC_MMAP_THRESHOLD_": "65536", "LLAMAPY_HEAP": "glibc"})
    return json.loads(d.stdout.strip().splitlines()[-1])


def py_run_peak(model: Path, s: Sizes, env: dict[str, str]) -> float:
    d = run([sys.executable, "-m", "llamapy", "run", "-m", str(model), "-p", RUN_PROMPT, "-n", "4", "-c", str(s.run_ctx),
             "-t", str(s.threads), "--temp", "0"], s.timeout, env)
    return float(d.maxrss)


def check_level(level: str, cpu_isa: str | None) -> None:
    """The kernels must have run at the level asked for (native: whatever the CPU's best is)."""
    if cpu_isa is None:
        return
    if cpu_isa == "torch":
        raise RuntimeError(f"--isa {level}: llamapy's kernels were off (cpu_isa=torch): PyTorch paths ran")
    if level != "native" and cpu_isa.split("+")[0] != level:
        raise RuntimeError(f"--isa {level}: llamapy's kernels ran at {cpu_isa!r}")


def check_cpp_level(level: str, features: str) -> None:
    """llama.cpp's build must be of the level asked for, as its system_info line says."""
    f = set(features.split())
    if not f:
        return
    if level == "avx2" and ("AVX512" in f or "AVX2" not in f):
        raise RuntimeError(f"--isa avx2: llama.cpp's build uses {features}")
    if level == "avx512" and "AVX512" not in f:
        raise RuntimeError(f"--isa avx512: llama.cpp's build lacks AVX512 ({features})")
    if level == "scalar" and f & {"AVX", "AVX2", "AVX512"}:
        raise RuntimeError(f"--isa scalar: llama.cpp's build uses {features}")


def measure(mr: ModelRun, level: str, bin_dir: Path | None, s: Sizes, text: Path, a) -> None:
    env = isa_env(level).apply()
    base = Path(tempfile.mkdtemp(prefix="vs_llamacpp_kld_")) / "f32-base.kld" if a.kld and s.ppl_chunks != 0 else None
    if base is not None:
        r = mr.attempt("llamapy --exact base", lambda: py_child("kld-base", mr.path, text, s, env, str(base)))
        mr.py["ppl_f32"] = r["ppl_f32"] if r else None
        if r is None:
            base = None
    if bin_dir is not None:
        mr.cpp |= mr.attempt("llama-bench", lambda: cpp_side.bench(bin_dir, mr.path, s)) or {}
        if s.npl > 0:
            mr.cpp["batched"] = mr.attempt("llama-batched-bench", lambda: cpp_side.batched(bin_dir, mr.path, s))
        if s.ppl_chunks != 0:
            mr.cpp["ppl"] = mr.attempt("llama-perplexity", lambda: cpp_side.perplexity(bin_dir, mr.path, text, s))
        if base is not None:
            mr.cpp |= mr.attempt("llama-perplexity --kl-divergence", lambda: cpp_side.kld(bin_dir, mr.path, base, s)) or {}
        peak = mr.attempt("llama-completion -n 4", lambda: cpp_side.run_peak(bin_dir, mr.path, s, RUN_PROMPT))
        mr.cpp["run_peak"], mr.cpp_features = peak if peak is not None else (None, "")
        mr.attempt("llama.cpp level check", lambda: check_cpp_level(level, mr.cpp_features))
    extra = ("--kld-base", str(base)) if base is not None else ()
    mr.py |= mr.attempt("llamapy bench/batched/perplexity", lambda: py_child("bench", mr.path, text, s, env, *extra)) or {}
    mr.attempt("ISA level check", lambda: check_level(level, mr.py.get("cpu_isa")))
    mr.py["load"] = mr.attempt("load probe", lambda: py_load(mr.path, s, env))
    mr.py["run_peak"] = mr.attempt("llamapy run -n 4", lambda: py_run_peak(mr.path, s, env))
    if base is not None:
        base.unlink(missing_ok=True)  # ~2 bytes per vocabulary entry per scored token
    if a.rounds > 1:
        speed_rounds(mr, bin_dir, s, text, env, a.rounds)
    if a.server:
        spec = server_load.LoadSpec(n_requests=a.requests, max_tokens=a.max_tokens, threads=s.threads, no_repack=s.no_repack)
        res = mr.attempt("server load", lambda: server_load.run_both(bin_dir, mr.path, spec, env))
        mr.server = {k: v.as_dict() for k, v in (res or {}).items()}
        for k, v in (res or {}).items():
            if v.errors:
                mr.errors.append(f"{mr.name}: {v.server}: {len(v.errors)} of {spec.n_requests} requests failed: {v.errors[0]}")


SPEED_KEYS = ("pp", "tg", "batched")


def speed_rounds(mr: ModelRun, bin_dir: Path | None, s: Sizes, text: Path, env: dict[str, str], rounds: int) -> None:
    """The speed rows (pp, tg, batched S_TG) measured `rounds` times in all, llama.cpp and
    llamapy taking turns (this kind of shared machine's speed drifts over minutes: one block of
    llama.cpp's runs and a later block of llamapy's would compare two different machines); each
    side's figure becomes the median of its rounds, every round kept under KEY_rounds."""
    speed = replace(s, ppl_chunks=0)
    seen = {side: {k: [d[k]] for k in SPEED_KEYS if d.get(k) is not None} for side, d in (("cpp", mr.cpp), ("py", mr.py))}
    for r in range(2, rounds + 1):
        got = {"cpp": {}, "py": {}}
        if bin_dir is not None:
            got["cpp"] = mr.attempt(f"llama-bench, round {r}", lambda: cpp_side.bench(bin_dir, mr.path, s)) or {}
            if s.npl > 0:
                got["cpp"]["batched"] = mr.attempt(f"llama-batched-bench, round {r}",
                                                   lambda: cpp_side.batched(bin_dir, mr.path, s))
        got["py"] = mr.attempt(f"llamapy bench/batched, round {r}",
                               lambda: py_child("bench", mr.path, text, speed, env)) or {}
        for side in ("cpp", "py"):
            for k in SPEED_KEYS:
                if got[side].get(k) is not None:
                    seen[side].setdefault(k, []).append(got[side][k])
    for side, d in (("cpp", mr.cpp), ("py", mr.py)):
        for k, vals in seen[side].items():
            d[k], d[f"{k}_rounds"] = statistics.median(vals), vals


def speed_targets(path: Path) -> tuple[float, float, float | None]:
    """(pp, tg, B=16) ratio targets for the file's kind: issue 47's rows (see the docstring)."""
    import gguf

    kv = gguf.GGUFReader(str(path)).fields
    arch = str(bytes(kv["general.architecture"].parts[-1]), "utf-8")

    def val(key: str) -> int:
        f = kv.get(f"{arch}.{key}")
        return int(f.parts[-1][0]) if f is not None else 0
    if val("expert_count") > 0:
        return 1.2, 1.0, None
    return (2.0, 1.2, 2.0) if val("embedding_length") < 1024 else (1.5, 1.0, 1.5)


def _at_least(x: float | None) -> str:
    return "" if x is None else f">= {x:g}x"


def rows_for(mr: ModelRun, s: Sizes, a) -> list[Row]:
    c, p, lab = mr.cpp, mr.py, label(mr.name, mr.path)
    f = float(mr.path.stat().st_size)
    load = p.get("load") or {}
    t_pp, t_tg, t_b = speed_targets(mr.path)
    rows = [Row(f"{lab} pp{s.pp} t/s", c.get("pp"), p.get("pp"), "speed", t_pp, _at_least(t_pp)),
            Row(f"{lab} tg{s.tg} t/s", c.get("tg"), p.get("tg"), "speed", t_tg, _at_least(t_tg))]
    if s.npl > 0:
        rows.append(Row(f"{lab} batched-bench S_TG, B={s.npl} (-npp {s.npp} -ntg {s.ntg} -kvu)", c.get("batched"),
                        p.get("batched"), "speed", t_b, _at_least(t_b)))
    if s.ppl_chunks != 0:
        chunks = f" --chunks {s.ppl_chunks}" if s.ppl_chunks > 0 else ""
        rows.append(Row(f"{lab} perplexity -c {s.ppl_ctx}{chunks}", c.get("ppl"), p.get("ppl"), "ppl", 0.01, "within 1%"))
    rows += [Row(f"{lab} weights resident (vs file)", f, p.get("resident"), "file", 1.1, "<= 1.1x file"),
             Row(f"{lab} Model.load RSS growth (vs file)", f, load.get("growth"), "file", 1.1, "<= 1.1x file"),
             Row(f"{lab} Model.load peak, VmHWM (vs file)", f, load.get("peak"), "peak", 1.1, "<= 1.1x file + 64 MiB",
                 64 * MiB),
             Row(f"{lab} peak RSS, `run -n 4 -c {s.run_ctx}`", c.get("run_peak"), p.get("run_peak"), "mem")]
    if a.server:
        sc, sp = mr.server.get("llamacpp", {}), mr.server.get("llamapy", {})
        rows += [Row(f"{lab} server tok/s ({a.requests} streams, 8 at a time, -c 8192 -np 8)", sc.get("tok_s"),
                     sp.get("tok_s"), "speed", 1.5, ">= 1.5x"),
                 Row(f"{lab} server TTFT p50", sc.get("ttft_p50"), sp.get("ttft_p50"), "time", 1.0, "<= 1x")]
    if a.kld:
        rows += [Row(f"{lab} same top-1 as f32 reference", c.get("same_top"), p.get("same_top"), "top", None,
                     ">= llama.cpp"),
                 Row(f"{lab} mean KLD from f32 reference", c.get("kld"), p.get("kld"), "kld", None, "<= llama.cpp")]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", default=None,
                    help=f"registered name or .gguf path, repeatable (default: {' and '.join(DEFAULT_MODELS)})")
    ap.add_argument("--isa", default="native", help=f"level(s), comma-separated: {', '.join(LEVELS)} (default native)")
    ap.add_argument("--llamacpp-bin", type=Path, default=None, help="llama.cpp's bin folder (default: the level's build)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-r", "--reps", type=int, default=None)
    ap.add_argument("-p", "--pp", type=int, default=None)
    ap.add_argument("-n", "--tg", type=int, default=None)
    ap.add_argument("-npp", type=int, default=None)
    ap.add_argument("-ntg", type=int, default=None)
    ap.add_argument("-npl", type=int, default=None)
    ap.add_argument("-f", "--ppl-file", type=Path, default=None, help="text to score (default: tests/data/prose_en*.txt)")
    ap.add_argument("--ppl-ctx", type=int, default=128)
    ap.add_argument("--chunks", dest="ppl_chunks", type=int, default=None, help="perplexity chunks (default all; --quick 8)")
    ap.add_argument("--server", action="store_true", help="also the server load (server_load.py)")
    ap.add_argument("--requests", type=int, default=None, help="server load: requests (default 32; --quick 8)")
    ap.add_argument("--max-tokens", type=int, default=None, help="server load: tokens each (default 64; --quick 16)")
    ap.add_argument("--kld", action="store_true", help="accuracy rows: same top-1 / mean KLD vs llamapy's f32 logits")
    ap.add_argument("--skip-kld", action="store_true", help=argparse.SUPPRESS)  # the old default; now --kld opts in
    ap.add_argument("--quick", action="store_true", help="smoke sizes: -p 64 -n 16 -npp 16 -ntg 16 -r 1, 8 requests of 16")
    ap.add_argument("--skip-batched", action="store_true", help="no batched-bench row (-npl 0)")
    ap.add_argument("--skip-ppl", action="store_true", help="no perplexity (nor KLD) row (--chunks 0)")
    ap.add_argument("--skip-llamacpp", action="store_true", help="llamapy's numbers only")
    ap.add_argument("--llamacpp-no-repack", action="store_true",
                    help="llama.cpp's tools with --no-repack (llama-bench --repack 0): its repacked layouts off, "
                         "for a build whose AMX path crashes (a VM listing AMX)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per tool run")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure the speed rows this many times, llama.cpp and llamapy taking turns; report medians")
    ap.add_argument("--json", type=Path, default=None, help="also write every raw number here")
    a = ap.parse_args(argv)
    levels = [x.strip() for x in a.isa.split(",") if x.strip()]
    for lv in levels:
        isa_env(lv)  # unknown level: ValueError naming it
    s = Sizes(a.threads, ppl_ctx=a.ppl_ctx, timeout=a.timeout, no_repack=a.llamacpp_no_repack)
    s = s.quick() if a.quick else s
    over = {k: getattr(a, k) for k in ("pp", "tg", "npp", "ntg", "npl", "ppl_chunks") if getattr(a, k) is not None}
    s = Sizes(**({f: getattr(s, f) for f in Sizes.__dataclass_fields__} | over | ({"reps": a.reps} if a.reps else {})))
    if a.skip_batched or a.skip_ppl:
        s = Sizes(**({f: getattr(s, f) for f in Sizes.__dataclass_fields__} | ({"npl": 0} if a.skip_batched else {})
                     | ({"ppl_chunks": 0} if a.skip_ppl else {})))
    a.requests = a.requests or (8 if a.quick else 32)
    a.max_tokens = a.max_tokens or (16 if a.quick else 64)
    sys.path.insert(0, str(ROOT / "src"))
    from llamapy.registry import resolve_model

    names = a.model or list(DEFAULT_MODELS)
    models = [(n, Path(resolve_model(n))) for n in names]
    text = a.ppl_file
    if text is None:
        text = Path(tempfile.mkdtemp(prefix="vs_llamacpp_")) / "prose.txt"
        text.write_text("".join(p.read_text(encoding="utf-8") for p in PROSE), encoding="utf-8")
    cpu = cpu_model()
    dump: dict = {"cpu": cpu, "threads": a.threads, "sizes": json.loads(s.to_json()), "levels": {}}
    tables: list[str] = []
    for lv in levels:
        bin_dir = None if a.skip_llamacpp else (a.llamacpp_bin or llamacpp_bin(lv))
        if bin_dir is not None and not (bin_dir / "llama-bench").is_file():
            raise SystemExit(f"--isa {lv}: no llama-bench in {bin_dir}: build it with "
                             f"LLAMACPP_ISA={lv} ../shared/tools/build-llamacpp.sh, or pass --llamacpp-bin")
        print(f"\n== {cpu} | ISA {lv} | {isa_env(lv).describe()} | llama.cpp {bin_dir}", file=sys.stderr, flush=True)
        runs = []
        for name, path in models:
            mr = ModelRun(name, path)
            measure(mr, lv, bin_dir, s, text, a)
            runs.append(mr)
        kern = sorted({str(mr.py.get("cpu_isa")) for mr in runs if mr.py.get("cpu_isa")})
        aten = sorted({str(mr.py.get("aten")) for mr in runs if mr.py.get("aten")})
        title = (f"{cpu} · ISA {lv} (llamapy kernels {'/'.join(kern) or '?'}, ATen {'/'.join(aten) or '?'}; "
                 f"llama.cpp {bin_dir.parent.name if bin_dir else '-'}{' --no-repack' if s.no_repack else ''}) · {a.threads} threads"
                 + (f" · speed rows: medians of {a.rounds} alternating rounds" if a.rounds > 1 else ""))
        rows = [r for mr in runs for r in rows_for(mr, s, a)]
        t = markdown(title, rows)
        feats = sorted({mr.cpp_features for mr in runs if mr.cpp_features})
        notes = ["", "(vs file): the llama.cpp column holds the GGUF file's size; the ratio is llamapy's / the file.",
                 f"llamapy: {isa_env(lv).describe()}; llama.cpp system_info CPU: {' / '.join(feats) or '-'}"]
        notes += [f"FAILED {e}" for mr in runs for e in mr.errors]
        tables.append(t + "\n".join(notes) + "\n")
        print("\n" + tables[-1], flush=True)
        dump["levels"][lv] = {
            "env": isa_env(lv).describe(), "llamacpp_bin": str(bin_dir) if bin_dir else None,
            "models": {mr.name: {"path": str(mr.path), "file_bytes": mr.path.stat().st_size, "llamacpp": mr.cpp,
                                 "llamacpp_cpu": mr.cpp_features, "llamapy": mr.py, "server": mr.server,
                                 "errors": mr.errors} for mr in runs}}
        if a.json:  # after every level: a later failure keeps what was measured
            a.json.write_text(json.dumps(dump, indent=2))
    if len(tables) > 1:
        print("\n".join(tables))
    return 1 if any(m.get("errors") for d in dump["levels"].values() for m in d["models"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
