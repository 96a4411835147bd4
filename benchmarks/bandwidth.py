"""This CPU's memory read bandwidth and, for a GGUF, the bandwidth bound on decode speed.

Bandwidth: a read-only sum over a buffer much larger than the last-level cache (default
1 GiB), with torch's sum at 1 and 2 threads (torch.set_num_threads), best of a few reps.
Honest caveat: a reduction kernel may be compute-bound on some CPUs, so this is a lower
bound on the attainable read bandwidth (a plain C reader was not added yet).

Bytes per decoded token: every weight tensor in full, except token_embd.weight, of which
one row is read (unless the output is tied to it, then it is read in full as the output),
plus the F16 K and V cache read at the given context. Bound t/s = bandwidth / bytes.

  python benchmarks/bandwidth.py -m FILE.gguf [-c 32] [--gib 1]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gguf
import torch


def read_bandwidth(gib: float = 1.0, threads: int = 1, reps: int = 5) -> float:
    """Best bytes/s of torch.sum over a gib-GiB int64 buffer with `threads` threads."""
    torch.set_num_threads(threads)
    buf = torch.ones(int(gib * 2**30) // 8, dtype=torch.int64)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t0)
    return buf.numel() * 8 / best


def bytes_per_token(path: Path, n_ctx: int) -> tuple[int, int]:
    """(weight bytes, KV bytes) read to decode one token at context n_ctx (F16 KV cache)."""
    r = gguf.GGUFReader(str(path))
    names = {t.name for t in r.tensors}
    tied = "output.weight" not in names
    weights = 0
    for t in r.tensors:
        n = int(t.n_bytes)
        if t.name == "token_embd.weight" and not tied:
            n //= int(t.shape[-1])  # one row of n_vocab
        weights += n
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()

    def kv(key: str) -> int:
        return int(r.fields[f"{arch}.{key}"].parts[-1][0])

    n_head = kv("attention.head_count")
    head_dim = kv("embedding_length") // n_head
    kv_bytes = 2 * kv("block_count") * kv("attention.head_count_kv") * head_dim * n_ctx * 2
    return weights, kv_bytes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", type=Path, default=None)
    ap.add_argument("-c", "--ctx", type=int, default=32, help="context the KV read is counted at")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("-t", "--threads", type=int, nargs="+", default=[1, 2])
    a = ap.parse_args(argv)
    bw = {t: read_bandwidth(a.gib, t) for t in a.threads}
    for t, b in bw.items():
        print(f"| read bandwidth | {a.gib:g} GiB | threads {t} | {b / 1e9:8.2f} GB/s |")
    if a.model:
        w, kvb = bytes_per_token(a.model, a.ctx)
        for t, b in bw.items():
            print(f"| {a.model.name} | {(w + kvb) / 2**20:.1f} MiB/token (KV {kvb / 2**20:.1f} at c{a.ctx}) "
                  f"| threads {t} | bound tg {b / (w + kvb):8.2f} t/s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
