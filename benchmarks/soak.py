#!/usr/bin/env python3
"""Soak: a real `llamapy serve` on 127.0.0.1 takes N mixed requests, at most C at a time.

Kinds (drawn with fixed weights from --seed):
  greedy, greedy-stream, chat     well-formed, temperature 0, 4-24 tokens        -> 200
  sampled                         temperature 0.8                                -> 200
  json                            a JSON Schema (response_format)                -> 200, valid JSON
                                                                                  (unless max_tokens ended it)
  cancel                          a stream closed after its second chunk         -> (client gone)
  malformed                       a body that is not JSON                        -> 400
  wrong-type                      max_tokens as a list                           -> 400
  too-long                        a prompt longer than a slot                    -> 400
  bad-grammar                     a GBNF grammar with an undefined rule          -> 400

Then: every distinct well-formed greedy request is sent again, alone, and its text compared
with what it got under load.  A row's arithmetic depends on how many rows share its products
(the 1-row, 2-4-row and 5+-row kernels, chunked prefill), so an output may differ where the
model's top two tokens are within rounding: for each difference the request alone is asked
for its top-2 probabilities at the first differing token, and a margin of NEAR_TIE or more
(a confident token) is a failure; the server's RSS (VmRSS from /proc) after the first 10% of the
requests and at the end; /metrics at the end (no request in flight, no KV cell held by one).
Exit status 1 when any expectation fails.

    .venv/bin/python benchmarks/soak.py -n 2000                 # SmolLM2, -np 4
    .venv/bin/python benchmarks/soak.py -m /path/tiny.gguf -n 300
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from server_load import free_port, serving  # noqa: E402

KINDS = {"greedy": 22, "greedy-stream": 14, "chat": 10, "sampled": 6, "json": 10, "cancel": 12, "malformed": 6,
         "wrong-type": 6, "too-long": 7, "bad-grammar": 7}
EXPECTED = {"greedy": 200, "greedy-stream": 200, "chat": 200, "sampled": 200, "json": 200, "cancel": 200,
            "malformed": 400, "wrong-type": 400, "too-long": 400, "bad-grammar": 400}
NEAR_TIE = 0.05  # top-2 probability margin under which two runs' rounding may pick either token
WORDS = ("the river ran past old stone walls while children counted boats and the baker sang of bread "
         "morning light fell on roofs a dog barked twice then slept under the cart near the market").split()
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "n": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "n"]}


@dataclass(slots=True)
class Job:
    kind: str
    path: str
    body: dict | bytes
    stream: bool = False
    status: int = 0
    text: str = ""
    error: str = ""
    finish: str = ""


@dataclass(slots=True)
class Report:
    counts: Counter = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    rss_warm_mib: float = 0.0
    rss_end_mib: float = 0.0
    identical: int = 0
    differing: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    rss_trace: list[float] = field(default_factory=list)  # MiB after each tenth of the requests
    anon_trace: list[float] = field(default_factory=list)  # ... of it, anonymous memory (not file pages)
    margins: list[float] = field(default_factory=list)  # per differing output: alone, p1 - p2 where it differs

    @property
    def confident_differences(self) -> int:
        """Outputs that differ from the request alone at a token the model was sure of (a bug:
        another request's mask, cells or sampler); near-ties are the batch's rounding."""
        return sum(not m < NEAR_TIE for m in self.margins)

    @property
    def ok(self) -> bool:
        return (not self.unexpected and self.confident_differences == 0 and self.rss_end_mib - self.rss_warm_mib <= 32
                and self.metrics.get("kv_cells_active", 1) == 0 and self.metrics.get("requests_processing", 1) == 0)


def make_jobs(n: int, seed: int, slot_tokens: int) -> list[Job]:
    rng = random.Random(seed)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))) for _ in range(24)]
    kinds = rng.choices(list(KINDS), weights=list(KINDS.values()), k=n)
    jobs = []
    for k in kinds:
        p, mt = rng.choice(prompts), rng.randint(4, 24)
        if k in ("greedy", "greedy-stream", "cancel", "sampled"):
            body = {"prompt": p, "max_tokens": mt if k != "cancel" else 64, "temperature": 0.8 if k == "sampled" else 0,
                    "stream": k in ("greedy-stream", "cancel")}
            jobs.append(Job(k, "/v1/completions", body, stream=body["stream"]))
        elif k == "chat":
            jobs.append(Job(k, "/v1/chat/completions", {"messages": [{"role": "user", "content": p}], "max_tokens": mt, "temperature": 0}))
        elif k == "json":
            jobs.append(Job(k, "/v1/chat/completions", {"messages": [{"role": "user", "content": "A name and a number as JSON: " + p}],
                                                        "max_tokens": 64, "temperature": 0,
                                                        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}))
        elif k == "malformed":
            jobs.append(Job(k, "/v1/completions", b'{"prompt": "' + p.encode() + b'", "max_tokens": '))
        elif k == "wrong-type":
            jobs.append(Job(k, "/v1/completions", {"prompt": p, "max_tokens": [mt]}))
        elif k == "too-long":
            jobs.append(Job(k, "/v1/completions", {"prompt": " ".join(WORDS * (slot_tokens // len(WORDS) + 2)), "max_tokens": 4}))
        else:
            jobs.append(Job(k, "/completion", {"prompt": p, "n_predict": 4, "grammar": "root ::= undefined_rule"}))
    return jobs


async def run_job(client: httpx.AsyncClient, j: Job) -> None:
    kw = {"content": j.body, "headers": {"content-type": "application/json"}} if isinstance(j.body, bytes) else {"json": j.body}
    try:
        if not j.stream:
            r = await client.post(j.path, **kw)
            j.status = r.status_code
            if r.status_code == 200:
                d = r.json()
                c = d["choices"][0]
                j.text = c["text"] if "text" in c else (c["message"]["content"] or "")
                j.finish = c["finish_reason"]
            return
        async with client.stream("POST", j.path, **kw) as r:
            j.status = r.status_code
            n = 0
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                d = json.loads(line[6:])
                if "error" in d:
                    j.error = d["error"]["message"]
                    return
                j.text += d["choices"][0].get("text") or ""
                n += 1
                if j.kind == "cancel" and n == 2:
                    return  # leaving the block closes the stream: the server cancels
    except httpx.HTTPError as e:
        j.error = f"{type(e).__name__}: {e}"


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """The process's resident set (or another /proc/pid/status field: RssAnon, RssFile), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def metrics(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("llamacpp:"):
            k, v = line.split()
            out[k.removeprefix("llamacpp:")] = float(v)
    return out


async def drive(url: str, jobs: list[Job], concurrency: int, on_tenth) -> None:
    """Run the jobs, at most `concurrency` at a time; on_tenth() after each tenth of them."""
    sem = asyncio.Semaphore(concurrency)
    done = 0
    tenth = max(1, len(jobs) // 10)

    async def one(client: httpx.AsyncClient, j: Job) -> None:
        nonlocal done
        async with sem:
            await run_job(client, j)
        done += 1
        if done % tenth == 0:
            on_tenth()

    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        await asyncio.gather(*(one(client, j) for j in jobs))


def check(jobs: list[Job], url: str, rep: Report, alone: bool = True) -> None:
    for j in jobs:
        rep.counts[j.kind] += 1
        if j.status != EXPECTED[j.kind] or (j.error and j.kind != "cancel"):
            rep.unexpected.append(f"{j.kind}: HTTP {j.status} {j.error[:120]}")
        elif j.kind == "json" and j.finish == "stop":  # ("length": max_tokens ended it first)
            try:
                d = json.loads(j.text)
                assert isinstance(d, dict) and set(SCHEMA["required"]) <= set(d)
            except (json.JSONDecodeError, AssertionError):
                rep.unexpected.append(f"json: not a valid object: {j.text[:80]!r}")
    seen: dict[str, str] = {}
    if not alone:
        return
    with httpx.Client(base_url=url, timeout=300) as c:
        for j in jobs:
            if j.kind not in ("greedy", "greedy-stream", "chat") or j.status != 200:
                continue
            key = json.dumps({**j.body, "stream": False}, sort_keys=True)
            if key not in seen:
                r = c.post(j.path, json={**j.body, "stream": False})
                ch = r.json()["choices"][0]
                seen[key] = ch["text"] if "text" in ch else (ch["message"]["content"] or "")
            if j.text == seen[key]:
                rep.identical += 1
            else:
                margin = tie_margin(c, j, seen[key])
                rep.margins.append(margin)
                rep.differing.append(f"{j.kind} {json.dumps(j.body)[:60]}: {j.text[:40]!r} alone {seen[key][:40]!r}; "
                                     f"alone, at the first differing token, top-2 probabilities differ by {margin:.3f}")


def tie_margin(c: httpx.Client, j: Job, alone: str) -> float:
    """The request alone again, with its top-2 probabilities: p1 - p2 at the token where the
    text under load first differs (a small margin: the two runs' rounding chose differently
    between near-equal tokens; a large one would be a bug)."""
    at = next((i for i, (x, y) in enumerate(zip(j.text, alone)) if x != y), min(len(j.text), len(alone)))
    if j.path == "/v1/completions":
        d = c.post(j.path, json={**j.body, "stream": False, "logprobs": 2}).json()["choices"][0]["logprobs"]
        steps = [(t, sorted((math.exp(v) for v in top.values()), reverse=True)) for t, top in zip(d["tokens"], d["top_logprobs"])]
    else:
        d = c.post(j.path, json={**j.body, "logprobs": True, "top_logprobs": 2}).json()["choices"][0]["logprobs"]["content"]
        steps = [(e["token"], sorted((math.exp(t["logprob"]) for t in e["top_logprobs"]), reverse=True)) for e in d]
    pos = 0
    for tok, probs in steps:
        if pos + len(tok) > at:
            return probs[0] - probs[1] if len(probs) > 1 else probs[0]
        pos += len(tok)
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("-n", "--requests", type=int, default=2000)
    ap.add_argument("-C", "--concurrency", type=int, default=8)
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None, help="write the report here")
    ap.add_argument("--skip-alone", action="store_true", help="do not send the greedy requests again alone (a quicker run)")
    a = ap.parse_args(argv)

    from llamapy.registry import resolve_model

    model = resolve_model(a.model)
    port = free_port()
    cmd = [sys.executable, "-m", "llamapy", "serve", "-m", str(model), "-c", str(a.ctx_size), "-np", str(a.parallel),
           "--host", "127.0.0.1", "--port", str(port), "-t", str(a.threads), "--metrics", "--max-queue", str(4 * a.requests)]
    jobs = make_jobs(a.requests, a.seed, a.ctx_size // a.parallel)
    rep = Report()
    t0 = time.perf_counter()
    with serving(cmd, port, None, "llamapy-soak", 300) as url:
        pid = _server_pid(port)
        rep.rss_warm_mib = rss_mib(pid)

        def tenth() -> None:  # the first tenth is the warm-up
            rep.rss_trace.append(rss_mib(pid))
            rep.anon_trace.append(rss_mib(pid, "RssAnon"))
            rep.rss_warm_mib = rep.rss_trace[0]
        asyncio.run(drive(url, jobs, a.concurrency, tenth))
        t_load = time.perf_counter() - t0
        time.sleep(0.5)  # cancels land within a step
        rep.rss_end_mib = rss_mib(pid)
        rep.metrics = metrics(url)
        check(jobs, url, rep, alone=not a.skip_alone)
    print(f"soak: {len(jobs)} requests in {t_load:.1f} s ({dict(rep.counts)}), concurrency {a.concurrency}, -np {a.parallel}")
    print(f"  unexpected statuses: {len(rep.unexpected)}" + "".join(f"\n    {u}" for u in rep.unexpected[:10]))
    print(f"  greedy outputs identical to the same request alone: {rep.identical} of {rep.identical + len(rep.differing)}"
          + "".join(f"\n    {d}" for d in rep.differing[:10]))
    print(f"  differing at a confident token (top-2 margin >= {NEAR_TIE}): {rep.confident_differences}")
    if rep.margins:
        ms = sorted(rep.margins)
        print(f"  where they differ, the top-2 probabilities of the request alone differ by: median {ms[len(ms) // 2]:.3f}, "
              f"max {ms[-1]:.3f} (all {len(ms)}: " + " ".join(f"{m:.3f}" for m in ms) + ")")
    print(f"  server RSS after warm-up {rep.rss_warm_mib:.1f} MiB, at the end {rep.rss_end_mib:.1f} MiB "
          f"(growth {rep.rss_end_mib - rep.rss_warm_mib:+.1f} MiB, limit +32); after each tenth: "
          + " ".join(f"{x:.0f}" for x in rep.rss_trace) + "; anonymous memory: " + " ".join(f"{x:.0f}" for x in rep.anon_trace))
    m = rep.metrics
    print(f"  /metrics at the end: requests_processing {m.get('requests_processing'):g}, kv_cells_active "
          f"{m.get('kv_cells_active'):g}, kv_cells_used {m.get('kv_cells_used'):g} (prompt caches {m.get('kv_cells_cached'):g})")
    print("  OK" if rep.ok else "  FAILED")
    if a.json:
        a.json.write_text(json.dumps({"ok": rep.ok, "counts": rep.counts, "unexpected": rep.unexpected, "identical": rep.identical,
                                      "differing": rep.differing, "rss_warm_mib": rep.rss_warm_mib, "rss_end_mib": rep.rss_end_mib,
                                      "rss_trace_mib": rep.rss_trace, "margins": rep.margins,
                                      "metrics": m}, indent=1))
    return 0 if rep.ok else 1


def _server_pid(port: int) -> int:
    """The pid listening on 127.0.0.1:port (the serve process), from /proc/net/tcp."""
    hexport = f"{port:04X}"
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[1].endswith(":" + hexport) and f[3] == "0A":
            inode = f[9]
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            for fd in (p / "fd").iterdir():
                if fd.readlink().name == f"socket:[{inode}]":
                    return int(p.name)
        except OSError:
            continue
    raise RuntimeError(f"no process listens on port {port}")


if __name__ == "__main__":
    sys.exit(main())
