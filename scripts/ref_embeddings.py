"""Reference embeddings from llama.cpp's llama-embedding, for tests/test_embeddings.py.

For each case writes the tiny BERT (or nomic-bert) GGUF with tests/tiny_bert.py (fixed seed: the test writes
the same bytes again and checks their sha256 against the one recorded here), or takes the
SmolLM2 file of the test fixture (its sha256 recorded too), then runs

    llama-embedding -m FILE -p "TEXT1\\nTEXT2..." --pooling P --embd-normalize N
                    --embd-output-format array -t 2

and writes tests/data/ref_embeddings/CASE.json: the texts, pooling, normalisation, the file's
sha256, the command, llama.cpp's version and the vectors (one per text; pooling none: one
per token).

    PYTHONPATH=src python scripts/ref_embeddings.py [--bin DIR] [CASE ...]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("LLAMACPP_BIN", Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin"))
OUT = ROOT / "tests/data/ref_embeddings"
RANK_TEXTS = ["what is a cat?\tthe cat sat on the mat", "what is a cat?\tquick brown fox", "what is a cat?\ta cat",
              "search model\tembedding model for text search", "search model\tthe lazy dog"]
TEXTS = ["Hello world, this is a test.", "The cat sat on the mat", "quick brown foxes jumped over the lazy dog!",
         "a", "search text embedding model, fast"]
# case -> (model: "bert" (tiny_bert's arguments) or "smollm2", pooling, embd_normalize)
CASES: dict[str, dict] = {
    "bert-mean": {"model": "bert", "pooling": "mean", "normalize": 2},
    "bert-cls": {"model": "bert", "pooling": "cls", "normalize": 2},
    "bert-none": {"model": "bert", "pooling": "none", "normalize": 2},
    "bert-mean-maxabs": {"model": "bert", "pooling": "mean", "normalize": 0},
    "bert-mean-p3": {"model": "bert", "pooling": "mean", "normalize": 3},
    "bert-mean-taxicab": {"model": "bert", "pooling": "mean", "normalize": 1},
    # rank: "query\tdocument" lines (llama-embedding's --cls-separator), the classifier's raw score first
    "bert-rank": {"model": "bert-rank", "pooling": "rank", "normalize": -1},
    # nomic-bert (tests/tiny_bert.py arch="nomic-bert"): RoPE, fused Q|K|V, SwiGLU
    "nomic-bert-mean": {"model": "nomic-bert", "pooling": "mean", "normalize": 2},
    "nomic-bert-none": {"model": "nomic-bert", "pooling": "none", "normalize": 2},
    # Qwen3-Embedding's shape: a qwen3 decoder whose GGUF says pooling_type 3 (last); the test
    # embeds with the file's default pooling
    "qwen3-last": {"model": "qwen3-embed", "pooling": "last", "normalize": 2},
    # Qwen3-Reranker's shape (tests/tiny_family.py rerank_head): the lines go through the GGUF's
    # rerank template; raw prints [P(yes), P(no)] per line
    "qwen3-rank": {"model": "qwen3-rerank", "pooling": "rank", "normalize": -1},
    "smollm2-mean": {"model": "smollm2", "pooling": "mean", "normalize": 2},
    "smollm2-last": {"model": "smollm2", "pooling": "last", "normalize": 2},
}


def sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_file(kind: str, tmp: Path) -> Path:
    if kind in ("bert", "bert-rank", "nomic-bert"):
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_bert import write_tiny_bert

        if kind == "bert-rank":  # a bge-reranker-style head: cls, cls.output, pooling_type rank
            return write_tiny_bert(tmp / "tiny_bert_rank.gguf", seed=1, pooling=4, rank_head=True)
        if kind == "nomic-bert":
            return write_tiny_bert(tmp / "tiny_nomic_bert.gguf", seed=2, arch="nomic-bert")
        return write_tiny_bert(tmp / "tiny_bert.gguf")
    if kind == "qwen3-embed":
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_family import write_tiny_family

        return write_tiny_family(tmp / "tiny_qwen3_embed.gguf", "qwen3", extra_keys={"pooling_type": 3})
    if kind == "qwen3-rerank":
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_family import write_tiny_family

        return write_tiny_family(tmp / "tiny_qwen3_rerank.gguf", "qwen3", rerank_head=True)
    from llamapy.registry import pull

    return Path(os.environ.get("LLAMAPY_TEST_SMOLLM2") or pull("smollm2-135m"))


def run_case(name: str, case: dict, bin_dir: Path, tmp: Path) -> dict:
    path = model_file(case["model"], tmp)
    texts = RANK_TEXTS if case["pooling"] == "rank" else TEXTS
    fmt = "raw" if case["pooling"] == "rank" else "array"  # rank: raw prints the n_cls_out scores (array reads past them)
    cmd = [str(bin_dir / "llama-embedding"), "-m", str(path), "-p", "\n".join(texts), "--pooling", case["pooling"],
           "--embd-normalize", str(case["normalize"]), "--embd-output-format", fmt, "-t", "2"]
    for _ in range(10):  # llama-embedding's log thread now and then exits before the whole array is out
        p = subprocess.run(cmd, capture_output=True, text=True, check=True)
        try:
            vectors = json.loads(p.stdout) if fmt == "array" else [[float(x) for x in ln.split()] for ln in p.stdout.split("\n")[: len(texts)]]
            if (len(vectors) == len(texts) or case["pooling"] == "none") and all(vectors):
                break
        except (json.JSONDecodeError, ValueError):
            continue
    else:
        raise RuntimeError(f"{name}: llama-embedding's output was not a whole JSON array in 10 runs")
    version = subprocess.run([str(bin_dir / "llama-embedding"), "--version"], capture_output=True, text=True)
    return {"case": name, **case, "texts": texts, "sha256": sha256(path),
            "command": " ".join(["llama-embedding", *cmd[1:2], path.name, *cmd[3:4], "<texts>", *cmd[5:]]),
            "llamacpp_version": (version.stdout + version.stderr).strip().splitlines()[0],
            "embeddings": vectors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, default=BIN)
    ap.add_argument("cases", nargs="*", default=list(CASES))
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        for name in a.cases:
            r = run_case(name, CASES[name], a.bin, Path(d))
            (OUT / f"{name}.json").write_text(json.dumps(r) + "\n")
            print(f"{name}: {len(r['embeddings'])} vectors")


if __name__ == "__main__":
    main()
