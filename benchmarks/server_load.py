"""Server load, side by side: llama-server and `llamapy serve` on the same GGUF, one after the
other, each given the same streaming /v1/completions requests.

    llama-server  -m F -c 8192 -np 8 --host 127.0.0.1 --port P -t T
    llamapy serve -m F -c 8192 -np 8 --host 127.0.0.1 --port P -t T   (under the ISA env)

Requests: `n_requests` prompts of 20-160 words cut from tests/data/prose_en*.txt at places drawn
from `seed`, max_tokens 64, temperature 0 (--temperature T: sampled, seeded), ignore_eos (every
request generates exactly max_tokens, so both servers do the same work), at most `concurrency`
in flight.  Each server first answers one short warm-up request, not timed.  Measured per server:
  tokens/s   generated tokens (the final chunk's usage.completion_tokens) / wall time from the
             first request sent to the last stream ended
  TTFT p50   median time from sending a request to its first chunk carrying text

Every request has a deadline; a server that does not become healthy in time, or dies, is an
error naming it; each server is killed (by its pid) before the next starts, whatever happens.

    .venv/bin/python benchmarks/server_load.py -m smollm2-135m --isa native -n 8
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import httpx

ROOT = Path(__file__).resolve().parents[1]
PROSE = sorted((ROOT / "tests/data").glob("prose_en*.txt"))


@dataclass(frozen=True, slots=True)
class LoadSpec:
    n_requests: int = 32
    concurrency: int = 8
    max_tokens: int = 64
    min_words: int = 20
    max_words: int = 160
    seed: int = 1234
    temperature: float = 0.0  # 0: greedy (the targets' load); above 0 each request samples, seeded
    n_ctx: int = 8192
    n_parallel: int = 8
    threads: int = 2
    request_timeout: float = 600.0  # seconds, one whole request
    ready_timeout: float = 300.0  # seconds, until /health answers 200
    no_repack: bool = False  # llama-server --no-repack (its AMX / repacked layouts off)


@dataclass(slots=True)
class LoadResult:
    server: str
    tokens: int = 0
    wall_s: float = 0.0
    ttft_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def ttft_p50(self) -> float | None:
        return statistics.median(self.ttft_s) if self.ttft_s else None

    def as_dict(self) -> dict:
        return asdict(self) | {"tok_s": self.tok_s, "ttft_p50": self.ttft_p50}


def make_prompts(spec: LoadSpec) -> list[str]:
    """`n_requests` prompts of min_words..max_words consecutive words of the prose, from `seed`."""
    words = " ".join(p.read_text(encoding="utf-8") for p in PROSE).split()
    if len(words) < spec.max_words:
        raise ValueError(f"{len(words)} words of prose in {ROOT / 'tests/data'}: need at least {spec.max_words}")
    rng = random.Random(spec.seed)
    out = []
    for _ in range(spec.n_requests):
        n = rng.randint(spec.min_words, spec.max_words)
        i = rng.randrange(len(words) - n + 1)
        out.append(" ".join(words[i:i + n]))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _one(client: httpx.AsyncClient, prompt: str, spec: LoadSpec, res: LoadResult) -> None:
    body = {"prompt": prompt, "max_tokens": spec.max_tokens, "temperature": spec.temperature, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    if spec.temperature > 0:
        body["seed"] = spec.seed
    t0 = time.perf_counter()
    ttft, n_chunks, usage = None, 0, None
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                raise RuntimeError(f"stream error: {ev['error']}")
            for c in ev.get("choices") or []:
                if c.get("text"):
                    n_chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - t0
            if ev.get("usage"):
                usage = ev["usage"]
            elif ev.get("timings", {}).get("predicted_n") and usage is None:
                usage = {"completion_tokens": ev["timings"]["predicted_n"]}
    res.tokens += int(usage["completion_tokens"]) if usage and "completion_tokens" in usage else n_chunks
    if ttft is not None:
        res.ttft_s.append(ttft)


async def drive(base_url: str, prompts: list[str], spec: LoadSpec, name: str) -> LoadResult:
    """Send every prompt, at most spec.concurrency at a time; time the whole run."""
    res = LoadResult(name)
    sem = asyncio.Semaphore(spec.concurrency)
    timeout = httpx.Timeout(spec.request_timeout, connect=10.0)
    limits = httpx.Limits(max_connections=spec.concurrency + 2, max_keepalive_connections=spec.concurrency + 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client:
        await asyncio.wait_for(_one(client, "Hello", LoadSpec(max_tokens=4), LoadResult("warm-up")), spec.request_timeout)

        async def task(i: int, p: str) -> None:
            async with sem:
                try:
                    await asyncio.wait_for(_one(client, p, spec, res), spec.request_timeout)
                except Exception as e:  # noqa: BLE001  (counted and reported, the run goes on)
                    res.errors.append(f"request {i}: {type(e).__name__}: {e}"[:300])

        t0 = time.perf_counter()
        await asyncio.gather(*(task(i, p) for i, p in enumerate(prompts)))
        res.wall_s = time.perf_counter() - t0
    return res


def _wait_ready(p: subprocess.Popen, url: str, log: Path, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"{name} exited with rc={p.returncode} before it was ready:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{name} not healthy after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def serving(cmd: list[str], port: int, env: dict[str, str] | None, name: str, ready_timeout: float) -> Iterator[str]:
    """Start `cmd` (listening on 127.0.0.1:`port`), wait for /health, yield its base URL;
    kill it (by its pid) on the way out, whatever happens."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    with tempfile.NamedTemporaryFile("w+", prefix=f"{name}-", suffix=".log", delete=False) as f:
        log = Path(f.name)
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        t0 = time.perf_counter()
        _wait_ready(p, url, log, name, ready_timeout)
        print(f"  {name} ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        yield url
    finally:
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(15)
        if p.returncode not in (0, -15):
            print(f"  {name} ended rc={p.returncode}; log {log}", file=sys.stderr)
        else:
            log.unlink(missing_ok=True)


def serve_and_drive(cmd: list[str], port: int, env: dict[str, str] | None, name: str, prompts: list[str],
                    spec: LoadSpec) -> LoadResult:
    """Start `cmd` (listening on `port`), wait for /health, drive it, kill it (always)."""
    with serving(cmd, port, env, name, spec.ready_timeout) as url:
        res = asyncio.run(drive(url, prompts, spec, name))
        print(f"  {name}: {res.tokens} tokens in {res.wall_s:.1f} s = {res.tok_s:.2f} t/s, TTFT p50 "
              f"{res.ttft_p50 if res.ttft_p50 is not None else float('nan'):.2f} s, {len(res.errors)} errors",
              file=sys.stderr, flush=True)
        return res


def llama_server_cmd(bin_dir: Path, model: Path, port: int, spec: LoadSpec) -> list[str]:
    return [str(bin_dir / "llama-server"), "-m", str(model), "-c", str(spec.n_ctx), "-np", str(spec.n_parallel),
            "--host", "127.0.0.1", "--port", str(port), "-t", str(spec.threads), *(["--no-repack"] if spec.no_repack else [])]


def llamapy_serve_cmd(model: Path, port: int, spec: LoadSpec) -> list[str]:
    return [sys.executable, "-m", "llamapy", "serve", "-m", str(model), "-c", str(spec.n_ctx), "-np",
            str(spec.n_parallel), "--host", "127.0.0.1", "--port", str(port), "-t", str(spec.threads)]


def run_both(bin_dir: Path | None, model: Path, spec: LoadSpec, py_env: dict[str, str]) -> dict[str, LoadResult]:
    """llama-server (when bin_dir is given), then llamapy serve, under the same prompts."""
    prompts = make_prompts(spec)
    out: dict[str, LoadResult] = {}
    if bin_dir is not None:
        port = free_port()
        out["llamacpp"] = serve_and_drive(llama_server_cmd(bin_dir, model, port, spec), port, None, "llama-server",
                                          prompts, spec)
    port = free_port()
    out["llamapy"] = serve_and_drive(llamapy_serve_cmd(model, port, spec), port, py_env, "llamapy-serve", prompts, spec)
    return out


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from isa_env import LEVELS, isa_env, llamacpp_bin

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("--isa", default="native", choices=LEVELS)
    ap.add_argument("--llamacpp-bin", type=Path, default=None)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--n-requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sampling temperature of every request (0: greedy, the targets' load; the server "
                         "chain's defaults otherwise: top-k 40, top-p 0.95, min-p 0.05)")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--llamacpp-no-repack", action="store_true",
                    help="llama-server --no-repack (where its repacked layouts crash: AMX listed but unusable)")
    a = ap.parse_args(argv)
    from llamapy.registry import resolve_model

    spec = LoadSpec(n_requests=a.n_requests, max_tokens=a.max_tokens, threads=a.threads, temperature=a.temperature,
                    no_repack=a.llamacpp_no_repack)
    bin_dir = None if a.skip_llamacpp else (a.llamacpp_bin or llamacpp_bin(a.isa))
    res = run_both(bin_dir, Path(resolve_model(a.model)), spec, isa_env(a.isa).apply())
    print(json.dumps({k: v.as_dict() | {"ttft_s": None} for k, v in res.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
