#!/usr/bin/env python3
"""What one decode of n rows costs: one sequence, after a prompt of -p tokens, a batch of n
consecutive tokens with logits on every row (a speculative verification of n - 1 drafts; n = 1
is a plain decode step), its cells removed again after each call; the median of -r calls per
row count.  The arithmetic of speculative decoding reads off these: a draft model's 1-row
cost against the target's 1-row and (k+1)-row costs.

    .venv/bin/python benchmarks/decode_rows.py -m smollm2-135m --rows 1,2,7
    .venv/bin/python benchmarks/decode_rows.py -m smollm2-f16.gguf --rows 1,7,31,32,49
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("--rows", default="1,2,7")
    ap.add_argument("-p", type=int, default=200, help="prompt tokens before the timed decodes")
    ap.add_argument("-r", "--reps", type=int, default=7)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args(argv)

    import torch

    import llamapy
    from llamapy.registry import resolve_model

    logging.getLogger("llamapy").setLevel(logging.ERROR)
    torch.set_num_threads(a.threads)
    rows = [int(r) for r in a.rows.split(",")]
    model = llamapy.Model.load(resolve_model(a.model))
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=a.p + max(rows) + 64, n_threads=a.threads))
    b = llamapy.Batch()
    for i in range(a.p):
        b.add((7 + 31 * i) % model.n_vocab, i, (0,), logits=i == a.p - 1)
    ctx.decode(b)
    print(f"{a.model}, prompt {a.p}, {a.threads} threads; median of {a.reps} decodes each")
    for n in rows:
        ts = []
        for _ in range(a.reps + 1):  # the first call of a size warms it
            b = llamapy.Batch()
            for j in range(n):
                b.add((5 + j) % model.n_vocab, a.p + j, (0,), logits=True)
            t = time.perf_counter()
            ctx.decode(b)
            ts.append(time.perf_counter() - t)
            ctx.memory.seq_rm(0, a.p, -1)
        med = statistics.median(ts[1:])
        print(f"  {n:4d} rows: {med * 1e3:8.2f} ms  ({med * 1e3 / n:.2f} ms a row)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
