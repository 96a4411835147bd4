#!/usr/bin/env python3
"""Speculative decoding, side by side: llama-server and `llamapy serve` on the same GGUF, each
without speculation and with it (`--spec-type ngram-simple`, and `--spec-type draft-simple -md
DRAFT` when --draft is given), one request at a time (speculation is about one stream's
latency), temperature 0, the same raw /completion requests:

  prose      free writing: little for an n-gram lookup to find
  code edit  a source file given in full, to be written back with one name changed
  qa         a passage given in full, and a question answered by quoting it

Every (server, mode) runs as its own process, all of them at once; each answers one warm-up
request, then each workload goes round them `-r` times, one request each a round (the
machine's speed moves by up to 2x within minutes, so a ratio is taken between requests of the
same round, never between runs minutes apart).  Per server, mode and workload: generated
tokens / seconds of generation (the response's timings.predicted_ms, which both servers
report; wall time when absent), the median over the rounds, and the acceptance rate
(timings.draft_n_accepted / draft_n).  The ratio columns are medians over the rounds of a
mode against the same server's plain decode, and of llamapy against llama.cpp in the same
mode.

    .venv/bin/python benchmarks/speculative.py -m smollm2-135m            # llama.cpp too when built
    .venv/bin/python benchmarks/speculative.py -m smollm2-135m --skip-llamacpp --modes plain,ngram-simple
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from server_load import free_port, serving  # noqa: E402


def workloads() -> dict[str, str]:
    """The three prompts (raw completions, no chat template: a small model follows a document's
    own structure better than an instruction), built from files in this repository."""
    code = "\n".join((ROOT / "src/llamapy/speculative/ngram_simple.py").read_text().splitlines()[14:44])
    edited = code.replace("hist", "history")
    words = sorted((ROOT / "tests/data").glob("prose_en*.txt"))[0].read_text().split()
    passage = " ".join(words[:160])
    return {
        "prose": "Once upon a time, in a fishing village at the edge of a cold northern sea, there lived",
        "code edit": f"# ngram_v1.py\n{code}\n\n\n# ngram_v2.py: the same code, with `hist` renamed to `history`\n"
                     + "\n".join(edited.splitlines()[:3]) + "\n",
        "qa": f"Passage: {passage}\n\nQuestion: What are the first three sentences of the passage?\n"
              f"Answer, quoting the passage word for word: \"{' '.join(words[:3])}",
    }


@dataclass(slots=True)
class Row:
    server: str
    mode: str
    workload: str
    tokens: int
    gen_s: float
    draft_n: int
    draft_accepted: int
    runs: list[float] = field(default_factory=list)  # tokens/s of each round, in round order

    @property
    def tok_s(self) -> float:
        return self.tokens / self.gen_s if self.gen_s > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.draft_accepted / self.draft_n if self.draft_n else None


def _ask(url: str, text: str, max_tokens: int) -> dict:
    body = {"prompt": text, "n_predict": max_tokens, "temperature": 0, "cache_prompt": False}
    t0 = time.perf_counter()
    r = httpx.post(url + "/completion", json=body, timeout=600)
    r.raise_for_status()
    out = r.json()
    out["_wall_s"] = time.perf_counter() - t0
    return out


def drive(urls: dict[tuple[str, str], str], max_tokens: int, reps: int) -> list[Row]:
    """Each workload `reps` rounds, each round one request to every (server, mode) in turn;
    per (server, mode, workload) the median run's row, with every round's speed."""
    for url in urls.values():
        _ask(url, "Say hi.", 8)  # warm-up, not timed
    rows = []
    for name, text in workloads().items():
        runs: dict[tuple[str, str], list[Row]] = {k: [] for k in urls}
        for _ in range(reps):
            for (server, mode), url in urls.items():
                out = _ask(url, text, max_tokens)
                t = out.get("timings") or {}
                gen_s = t["predicted_ms"] / 1000 if t.get("predicted_ms") else out["_wall_s"]
                runs[(server, mode)].append(Row(server, mode, name, int(out["tokens_predicted"]), gen_s,
                                                int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0))))
        for (server, mode), rs in runs.items():
            r = sorted(rs, key=lambda x: x.tok_s)[len(rs) // 2]
            r.runs = [x.tok_s for x in rs]
            rows.append(r)
            acc = f", accepted {r.draft_accepted}/{r.draft_n}" if r.draft_n else ""
            print(f"  {server} {mode} {name}: {r.tokens} tokens, {r.tok_s:.1f} t/s (rounds: "
                  f"{', '.join(f'{x:.1f}' for x in r.runs)}){acc}", file=sys.stderr, flush=True)
    return rows


def mode_flags(mode: str, draft: Path | None, n_max: int) -> list[str]:
    if mode == "plain":
        return []
    if mode == "ngram-simple":
        return ["--spec-type", "ngram-simple"]
    return ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", str(n_max)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m", help="target: a GGUF path or a registered name")
    ap.add_argument("--draft", default=None, help="draft model for draft-simple (a GGUF path or a registered name)")
    ap.add_argument("--modes", default="plain,ngram-simple,draft-simple")
    ap.add_argument("--spec-draft-n-max", type=int, default=3)
    ap.add_argument("-n", "--max-tokens", type=int, default=192)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5, help="rounds of each request; medians are reported")
    ap.add_argument("--llamacpp-bin", type=Path, default=Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)

    from llamapy.registry import resolve_model

    model = resolve_model(a.model)
    draft = resolve_model(a.draft) if a.draft else None
    modes = [m for m in a.modes.split(",") if m != "draft-simple" or draft is not None]
    servers = []
    if not a.skip_llamacpp and (a.llamacpp_bin / "llama-server").exists():
        servers.append(("llama.cpp", [str(a.llamacpp_bin / "llama-server")]))
    servers.append(("llamapy", [sys.executable, "-m", "llamapy", "serve"]))
    with contextlib.ExitStack() as stack:  # every (server, mode) up at once: their requests alternate
        urls = {}
        for server, cmd0 in servers:
            for mode in modes:
                port = free_port()
                cmd = cmd0 + ["-m", str(model), "-c", "4096", "-np", "1", "--host", "127.0.0.1", "--port", str(port),
                              "-t", str(a.threads)] + mode_flags(mode, draft, a.spec_draft_n_max)
                urls[(server, mode)] = stack.enter_context(serving(cmd, port, None, f"{server}-{mode}", 300))
        rows = drive(urls, a.max_tokens, a.reps)
    print_table(rows)
    if a.json:
        a.json.write_text(json.dumps([asdict(r) | {"tok_s": r.tok_s} for r in rows], indent=1))
    return 0


def print_table(rows: list[Row]) -> None:
    """One markdown row per (server, mode, workload): the median round's speed, and the
    medians over the rounds of its ratio to the same server's plain decode and, for llamapy,
    to llama.cpp in the same mode (requests of the same round)."""
    by = {(r.server, r.mode, r.workload): r for r in rows}

    def ratio(a: Row, b: Row | None) -> str:
        if b is None or len(a.runs) != len(b.runs) or not all(b.runs):
            return ""
        return f"{statistics.median(x / y for x, y in zip(a.runs, b.runs)):.2f}x"

    print("| server | mode | workload | tokens | t/s | accepted | vs plain | vs llama.cpp |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        plain = by.get((r.server, "plain", r.workload)) if r.mode != "plain" else None
        cpp = by.get(("llama.cpp", r.mode, r.workload)) if r.server == "llamapy" else None
        acc = f"{r.acceptance:.0%} ({r.draft_accepted}/{r.draft_n})" if r.acceptance is not None else ""
        print(f"| {r.server} | {r.mode} | {r.workload} | {r.tokens} | {r.tok_s:.1f} | {acc} | {ratio(r, plain)} | "
              f"{ratio(r, cpp)} |")


if __name__ == "__main__":
    sys.exit(main())
