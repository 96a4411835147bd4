#!/usr/bin/env python3
"""Structured output, side by side: decode speed with and without a JSON-Schema constraint,
llama-server and `llamapy serve` on the same GGUF, the same raw /completion requests.

Requests: the 20 prompts of tests/structured_cases.py in ChatML (SmolLM2's template), each
once with its schema (`json_schema`, temperature 0, at most -n tokens) and once free with
exactly as many tokens as its constrained answer took (ignore_eos, n_predict = that count):
the same rows at the same positions in every batch, so the ratio is the constraint's cost
alone, not a difference in answer lengths.
  B=1  one request at a time (per request: timings.predicted_n / predicted_ms, summed)
  B=8  eight at a time on `-np 8` (tokens generated / wall time of the whole set)
Both servers report timings.predicted_*, so B=1 excludes prompt processing on both sides.
Each set runs -r times (json and free alternating); the median run is reported.

Compile time (llamapy, in-process): the vocabulary table llguidance needs (once per model),
then each schema's first compile and its cached reuse; and over HTTP, the latency of an
n_predict=1 request with a schema the server has not seen against the same request again.

    .venv/bin/python benchmarks/structured.py                  # llama.cpp too when built
    .venv/bin/python benchmarks/structured.py --skip-llamacpp
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from server_load import free_port, serving  # noqa: E402
from structured_cases import SCHEMAS  # noqa: E402

SYSTEM = "Reply with JSON only."


def chatml(user: str) -> str:
    return f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


@dataclass(slots=True)
class Row:
    server: str
    batch: int
    mode: str  # free | json
    requests: int
    tokens: int
    seconds: float
    invalid: int = 0

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _body(prompt: str, schema: dict | None, n: int) -> dict:
    b = {"prompt": chatml(prompt), "n_predict": n, "temperature": 0, "cache_prompt": False}
    if schema is not None:
        b["json_schema"] = schema
    else:
        b["ignore_eos"] = True
    return b


def _valid(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except json.JSONDecodeError:
        return False


async def run_set(url: str, server: str, mode: str, batch: int, n: int | list[int]) -> tuple[Row, list[int]]:
    """The 20 requests, `batch` at a time: json with at most n tokens each, or free with n[i]
    tokens for request i.  The row, and each request's generated token count."""
    cases = [(p, s if mode == "json" else None) for p, s in SCHEMAS]
    sem = asyncio.Semaphore(batch)
    out: list[dict | None] = [None] * len(cases)

    async def one(client: httpx.AsyncClient, i: int, prompt: str, schema: dict | None) -> None:
        async with sem:
            r = await client.post("/completion", json=_body(prompt, schema, n if isinstance(n, int) else n[i]))
            r.raise_for_status()
            out[i] = r.json()

    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(client, i, p, s) for i, (p, s) in enumerate(cases)))
        wall = time.perf_counter() - t0
    tokens = sum(int(o["tokens_predicted"]) for o in out)
    secs = sum(o["timings"]["predicted_ms"] for o in out) / 1000 if batch == 1 else wall
    invalid = sum(not _valid(o["content"]) for o in out) if mode == "json" else 0
    row = Row(server, batch, mode, len(out), tokens, secs, invalid)
    print(f"  {server} B={batch} {mode}: {tokens} tokens in {secs:.2f} s = {row.tok_s:.1f} t/s"
          + (f", {invalid} not JSON" if invalid else ""), file=sys.stderr, flush=True)
    return row, [int(o["tokens_predicted"]) for o in out]


def http_compile_ms(url: str, reps: int = 5) -> tuple[float, float]:
    """Median latency (ms) of an n_predict=1 request whose schema is new to the server, and of
    the same request again (its compiled grammar cached)."""
    fresh, cached = [], []
    for _ in range(reps):
        schema = json.loads(json.dumps(SCHEMAS[18][1]))
        schema["properties"][f"x{uuid.uuid4().hex[:8]}"] = {"type": "integer"}  # a schema text never seen
        body = _body(SCHEMAS[18][0], schema, 1)
        for dst in (fresh, cached):
            t0 = time.perf_counter()
            httpx.post(url + "/completion", json=body, timeout=120).raise_for_status()
            dst.append((time.perf_counter() - t0) * 1000)
    return statistics.median(fresh), statistics.median(cached)


def inprocess_compile(model_name: str) -> dict[str, float]:
    from llamapy.grammar import GrammarCompiler, GrammarSpec
    from llamapy.model.model import Model

    model = Model.load(model_name)
    c = GrammarCompiler(model.tokenizer, model.n_vocab)
    t0 = time.perf_counter()
    c.ll_tokenizer
    t_vocab = time.perf_counter() - t0
    first, again = [], []
    for _, s in SCHEMAS:
        spec = GrammarSpec.json_schema(s)
        t0 = time.perf_counter()
        c.compile(spec)
        first.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        c.constraint(spec)
        again.append(time.perf_counter() - t0)
    return {"vocab_ms": t_vocab * 1000, "first_ms": statistics.median(first) * 1000,
            "first_max_ms": max(first) * 1000, "cached_ms": statistics.median(again) * 1000}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("-n", "--max-tokens", type=int, default=96)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=3, help="runs of each set; the median is reported")
    ap.add_argument("--llamacpp-bin", type=Path, default=Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin")
    ap.add_argument("--skip-llamacpp", action="store_true")
    a = ap.parse_args(argv)

    from llamapy.registry import resolve_model

    model = resolve_model(a.model)
    print(f"CPU: {platform.processor() or platform.machine()}; model {model.name}", file=sys.stderr)
    comp = inprocess_compile(str(model))
    servers = []
    if not a.skip_llamacpp and (a.llamacpp_bin / "llama-server").exists():
        servers.append(("llama.cpp", [str(a.llamacpp_bin / "llama-server")]))
    servers.append(("llamapy", [sys.executable, "-m", "llamapy", "serve"]))
    rows: list[Row] = []
    http: dict[str, tuple[float, float]] = {}
    for server, cmd0 in servers:
        port = free_port()
        cmd = cmd0 + ["-m", str(model), "-c", "8192", "-np", "8", "--host", "127.0.0.1", "--port", str(port), "-t", str(a.threads)]
        with serving(cmd, port, None, server, 300) as url:
            httpx.post(url + "/completion", json=_body("Say hi.", {"type": "object"}, 4), timeout=120)  # warm-up
            for batch in (1, 8):
                runs: dict[str, list[Row]] = {"json": [], "free": []}
                for _ in range(a.reps):  # json and free alternate, so a slow spell hits both
                    row, counts = asyncio.run(run_set(url, server, "json", batch, a.max_tokens))
                    free, _ = asyncio.run(run_set(url, server, "free", batch, [max(c, 1) for c in counts]))
                    runs["json"].append(row)
                    runs["free"].append(free)
                rows += [sorted(runs[m], key=lambda r: r.tok_s)[len(runs[m]) // 2] for m in ("free", "json")]
            http[server] = http_compile_ms(url)
    print_tables(rows, comp, http)
    return 0


def print_tables(rows: list[Row], comp: dict[str, float], http: dict[str, tuple[float, float]]) -> None:
    by = {(r.server, r.batch, r.mode): r for r in rows}
    print("| server | B | mode | tokens | t/s | json vs free | vs llama.cpp |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        free = by.get((r.server, r.batch, "free"))
        cpp = by.get(("llama.cpp", r.batch, r.mode)) if r.server == "llamapy" else None
        vs_free = f"{r.tok_s / free.tok_s:.2f}x" if r.mode == "json" and free and free.tok_s else ""
        vs_cpp = f"{r.tok_s / cpp.tok_s:.2f}x" if cpp and cpp.tok_s else ""
        bad = f" ({r.invalid} not JSON)" if r.invalid else ""
        print(f"| {r.server} | {r.batch} | {r.mode}{bad} | {r.tokens} | {r.tok_s:.1f} | {vs_free} | {vs_cpp} |")
    print()
    print(f"llamapy compile (in-process, {len(SCHEMAS)} schemas): vocabulary table {comp['vocab_ms']:.0f} ms once per model; "
          f"first compile median {comp['first_ms']:.2f} ms (max {comp['first_max_ms']:.2f}); cached {comp['cached_ms']:.3f} ms")
    for server, (fresh, cached) in http.items():
        print(f"{server}: n_predict=1 request with a new schema {fresh:.1f} ms, the same again {cached:.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
