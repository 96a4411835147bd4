"""Embedding throughput through the servers: `llamapy serve --embedding` against llama.cpp's
`llama-server --embedding`, same file, same flags, 2 threads each, on a random bge-small-shaped
BERT (384 wide, 12 layers, F32; tests/tiny_bert.py) and 64 texts of 20-200 tokens sent as ONE
`/v1/embeddings` request (the batched case of issue 45).  The servers run one after the other
(never both at once), A/B/A/B, and the time is the request's wall time after a warm-up request,
so loading is not counted.  Read the ratio, not the figures, on a shared CPU.

    PYTHONPATH=src python benchmarks/embeddings_server.py [--bin DIR] [--np 4] [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("LLAMACPP_BIN", Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before /health answered")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url}/health did not answer 200 within {timeout:.0f} s")


def texts_per_s(cmd: list[str], port: int, texts: list[str], reps: int) -> list[float]:
    """Start the server, one warm-up request, then `reps` timed requests of all texts at once."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        out = post(url + "/v1/embeddings", {"input": texts})
        assert len(out["data"]) == len(texts), f"{len(out['data'])} embeddings for {len(texts)} texts"
        rates = []
        for _ in range(reps):
            t0 = time.perf_counter()
            post(url + "/v1/embeddings", {"input": texts})
            rates.append(len(texts) / (time.perf_counter() - t0))
        return rates
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, default=BIN)
    ap.add_argument("--np", type=int, default=4, help="-np for both servers (llama-server's auto is 4)")
    ap.add_argument("--reps", type=int, default=3, help="timed requests per server start")
    ap.add_argument("--rounds", type=int, default=2, help="A/B rounds (each starts both servers once)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_bert import WORDS, write_tiny_bert

    d = Path(tempfile.mkdtemp())
    path = write_tiny_bert(d / "bge_like.gguf", n_embd=384, n_layer=12, n_head=12, n_ff=1536, n_ctx_train=512, pooling=2)
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(18, 198))) for _ in range(64)]
    common = ["-m", str(path), "--embedding", "-t", "2", "-c", "8192", "-b", "4096", "-ub", "4096", "-np", str(a.np)]
    ours_all: list[float] = []
    ref_all: list[float] = []
    for _ in range(a.rounds):
        p = free_port()
        ours = texts_per_s([sys.executable, "-m", "llamapy", "serve", *common, "--port", str(p)], p, texts, a.reps)
        p = free_port()
        ref = texts_per_s([str(a.bin / "llama-server"), *common, "--port", str(p)], p, texts, a.reps)
        print(f"llamapy {statistics.median(ours):.1f} texts/s, llama-server {statistics.median(ref):.1f} texts/s")
        ours_all += ours
        ref_all += ref
    o, r = statistics.median(ours_all), statistics.median(ref_all)
    print(f"median over {len(ours_all)} requests each, -np {a.np}: llamapy {o:.1f} texts/s, "
          f"llama-server {r:.1f} texts/s, ratio x{o / r:.2f}")


if __name__ == "__main__":
    main()
