"""Reference answers of llama.cpp's llama-server for tests/test_server_embeddings.py and
tests/test_rerank.py: the tiny BERT (tests/tiny_bert.py, seed 0) under --embedding and the tiny
BERT reranker (seed 1, rank head) under --reranking, and a tiny Qwen3-Reranker (tests/tiny_family.py
qwen3 with rerank_head: cls.output "yes"/"no", the rerank template) under --reranking, asked the requests below; each answer is
written with its request, the file's sha256, the command and llama.cpp's version to
tests/data/ref_embeddings/server-CASE.json.

    PYTHONPATH=src python scripts/ref_server_embeddings.py [--bin DIR] [CASE ...]
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ref_embeddings import BIN, OUT, ROOT, sha256  # noqa: E402

TEXTS = ["Hello world, this is a test.", "The cat sat on the mat", "a", "quick brown foxes jumped over the lazy dog!"]
DOCS = ["the cat sat on the mat", "quick brown fox", "a cat", "lazy dog", "search text"]
CASES = {
    "bert": ({"seed": 0}, ["--embedding"], [("/v1/embeddings", {"input": TEXTS}), ("/embedding", {"content": TEXTS[1]})]),
    "rerank": ({"seed": 1, "pooling": 4, "rank_head": True}, ["--reranking"],
               [("/rerank", {"query": "what is a cat?", "documents": DOCS, "top_n": 4}),
                ("/v1/rerank", {"query": "search model", "documents": DOCS})]),
    "qwen3-rerank": ({"family": "qwen3", "rerank_head": True}, ["--reranking", "-c", "8192"],
                     [("/rerank", {"query": "what is a cat?", "documents": DOCS, "top_n": 4}),
                      ("/v1/rerank", {"query": "search model", "documents": DOCS})]),
}


def write_model(path: Path, kw: dict) -> Path:
    """The case's tiny file: tests/tiny_family.py's when kw names a family, else tests/tiny_bert.py's."""
    from tiny_bert import write_tiny_bert
    from tiny_family import write_tiny_family

    kw = dict(kw)
    family = kw.pop("family", None)
    return write_tiny_family(path, family, **kw) if family else write_tiny_bert(path, **kw)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def ask(bin_dir: Path, path: Path, flags: list[str], reqs: list) -> tuple[list, list[str]]:
    port = free_port()
    cmd = [str(bin_dir / "llama-server"), "-m", str(path), "--port", str(port), "-t", "2", "-c", "512", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return [httpx.post(f"http://127.0.0.1:{port}{route}", json=body, timeout=60).json() for route, body in reqs], cmd
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, default=BIN)
    ap.add_argument("cases", nargs="*", default=list(CASES))
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))

    version = subprocess.run([str(a.bin / "llama-server"), "--version"], capture_output=True, text=True)
    with tempfile.TemporaryDirectory() as d:
        for name in a.cases:
            kw, flags, reqs = CASES[name]
            path = write_model(Path(d) / f"tiny_{name}.gguf", kw)
            answers, cmd = ask(a.bin, path, flags, reqs)
            out = {"case": name, "writer": kw, "flags": flags, "sha256": sha256(path),
                   "command": " ".join(["llama-server", "-m", path.name, "--port", "PORT", *cmd[5:]]),
                   "llamacpp_version": (version.stdout + version.stderr).strip().splitlines()[0],
                   "exchanges": [{"route": r, "request": b, "response": ans} for (r, b), ans in zip(reqs, answers)]}
            (OUT / f"server-{name}.json").write_text(json.dumps(out) + "\n")
            print(f"server-{name}: {len(answers)} answers")


if __name__ == "__main__":
    main()
