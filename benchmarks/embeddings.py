"""Embedding throughput, llamapy's Embedder against llama.cpp's llama-embedding, on a random
bge-small-shaped BERT (384 wide, 12 layers, F32; tests/tiny_bert.py) and 64 texts of 20-200
tokens, 2 threads each.  llama-embedding's time is its whole run (load included, small here):
run it after llamapy's warm-up, and read the ratio, not the figures (a shared CPU).

    PYTHONPATH=src python benchmarks/embeddings.py [--bin DIR]
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("LLAMACPP_BIN", Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, default=BIN)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    import torch
    from tiny_bert import WORDS, write_tiny_bert

    from llamapy.context import Context
    from llamapy.embed import Embedder
    from llamapy.model.model import Model
    from llamapy.params import ContextParams

    torch.set_num_threads(2)
    d = Path(tempfile.mkdtemp())
    path = write_tiny_bert(d / "bge_like.gguf", n_embd=384, n_layer=12, n_head=12, n_ff=1536, n_ctx_train=512, pooling=2)
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(18, 198))) for _ in range(64)]
    (d / "texts.txt").write_text("\n".join(texts))
    m = Model.load(path)
    e = Embedder(Context(m, ContextParams(n_ctx=4096, n_batch=4096, n_ubatch=4096, n_seq_max=64, kv_unified=True)), None, 2)
    seqs = [m.tokenize(t, True, True) for t in texts]
    e.embed_tokens(seqs)  # warm-up
    for _ in range(a.reps):
        t0 = time.perf_counter()
        e.embed_tokens(seqs)
        ours = 64 / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run([str(a.bin / "llama-embedding"), "-m", str(path), "-f", str(d / "texts.txt"), "-t", "2", "-c", "4096",
                        "-b", "4096", "-ub", "4096", "--embd-output-format", "array"], capture_output=True, check=True)
        ref = 64 / (time.perf_counter() - t0)
        print(f"{sum(map(len, seqs))} tokens: llamapy {ours:.1f} texts/s, llama-embedding {ref:.1f} texts/s (x{ours / ref:.2f})")


if __name__ == "__main__":
    main()
