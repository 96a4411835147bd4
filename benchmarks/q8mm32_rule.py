#!/usr/bin/env python3
"""Where the types of a scale per 32 should take int8 prompt products (kernels/c/q8mm32_x86.c)
and where they should keep the int16 lanes: a real prompt's activations of every such product
(captured from a model's prompt decode), their outlier blocks per block column, and each
product's time both ways; then one product shape with outliers planted in a growing fraction
of (tile, block) pairs, which puts the crossover (LP_Q8MM32_MAX_FIXES) on a measurement.

    .venv/bin/python benchmarks/q8mm32_rule.py -m gemma3-270m -p 512 -t 2
Not a test: the times depend on the machine.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path


def best(fn, reps: int, cpu: bool) -> float:
    """The best of reps calls: wall time, or the process's CPU time (every thread's; on a shared
    machine a call preempted for a while still counts only the time it ran)."""
    clock = time.process_time if cpu else time.perf_counter
    t = float("inf")
    for _ in range(reps):
        t0 = clock()
        fn()
        t = min(t, clock() - t0)
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="gemma3-270m")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("--cpu-time", action="store_true", help="time by the process's CPU time, not the wall (a shared machine)")
    ap.add_argument("--sweep-only", action="store_true", help="only the planted sweep")
    ap.add_argument("--shape", default="2048x640", help="n_out x n_in of the planted sweep (Q5_0)")
    a = ap.parse_args(argv)

    import torch

    import llamapy
    from llamapy.kernels.types import Q8MM32_MAX_FIXES, Q8MM32_RATIO, Q8MM_MAX_FLAGGED, Q8MM_RATIO
    from llamapy.model.block_matrix import BlockMatrix

    logging.getLogger("llamapy").setLevel(logging.ERROR)
    torch.set_num_threads(a.threads)
    model = llamapy.Model.load(a.model)
    text = (Path(__file__).resolve().parents[1] / "docs" / "kernels.md").read_text()
    toks = model.tokenize(text)[: a.p]
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=a.p + 64, n_threads=a.threads))
    seen: dict[tuple, tuple] = {}
    orig = BlockMatrix._mm

    def capture(self, x, y, accumulate):  # the first call of each (type, shape, layer order)
        if x.shape[0] >= 64 and int(self.qtype) in (2, 3, 6, 7, 8):
            seen.setdefault((self.qtype.name, self.n_out, self.n_in, len(seen)), (self, x.detach().float().clone()))
        return orig(self, x, y, accumulate)

    BlockMatrix._mm = capture
    b = llamapy.Batch()
    for i, t in enumerate(toks):
        b.add(t, i, [0], logits=i == len(toks) - 1)
    ctx.decode(b)
    BlockMatrix._mm = orig
    lib = next(iter(seen.values()))[0].lib
    fn = lib.fn

    def timed(bm, x) -> tuple[float, float]:
        """(lanes, int8): the best of reps calls each, the two alternating (a shared machine's drift hits both)."""
        y = torch.empty(x.shape[0], bm.n_out)
        t = [float("inf"), float("inf")]
        fn.lp_q8mm32_set(1.0, Q8MM32_RATIO[lib.level])
        for _ in range(a.reps):
            for int8 in (0, 1):
                fn.lp_q8mm_set(int8, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
                t[int8] = min(t[int8], best(lambda: bm._mm(x, y, False), 1, a.cpu_time))
        fn.lp_q8mm_set(1, Q8MM_RATIO, Q8MM_MAX_FLAGGED)
        fn.lp_q8mm32_set(Q8MM32_MAX_FIXES, Q8MM32_RATIO[lib.level])
        return t[0], t[1]

    if a.sweep_only:
        seen_all = seen
        seen = {}
    print(f"{a.model}: {len(toks)} tokens, {len(seen)} products of the 32-block types, {a.threads} threads")
    print("type  shape       rows-flag  fixes  cols-any  top10%cols  lanes ms  int8 ms  int8/lanes")
    tot = [0.0, 0.0]
    for (name, n_out, n_in, _), (bm, x) in seen.items():
        n, nb = x.shape[0], n_in // 32
        blk = x.view(n, nb, 32)
        amax, ss = blk.abs().amax(-1), (blk * blk).sum(-1)
        flag = (amax * amax * 32 > Q8MM32_RATIO[lib.level] ** 2 * ss) & (amax > 0)  # [n, nb]
        per_col = flag.float().mean(0)  # the fraction of rows flagged, per block column
        top = per_col.sort(descending=True).values[: max(1, nb // 10)].sum() / max(per_col.sum().item(), 1e-9)
        fixes = fn.lp_q8mm32_fixes(x.data_ptr(), n_in, n, Q8MM32_RATIO[lib.level], 1)
        tl, t8 = timed(bm, x)
        tot[0] += tl
        tot[1] += t8
        print(f"{name:5} {n_out:5}x{n_in:<5} {flag.float().mean().item():8.3f} {fixes:6.3f} {(per_col > 0).float().mean().item():8.3f}"
              f" {top.item():10.3f}  {1e3 * tl:8.2f} {1e3 * t8:8.2f}  {t8 / tl:6.2f}")
    print(f"all: lanes {1e3 * tot[0]:.1f} ms, int8 (every one) {1e3 * tot[1]:.1f} ms")

    # the planted sweep: gaussian rows, an outlier (30) in a fraction f of the blocks, anywhere
    n_out, n_in = (int(v) for v in a.shape.split("x"))
    seen = seen_all if a.sweep_only else seen
    bm = next((bm for (nm, o, i, _), (bm, _x) in seen.items() if nm == "Q5_0" and (o, i) == (n_out, n_in)), None)
    if bm is None:
        return 0
    g = torch.Generator().manual_seed(0)
    print(f"planted: Q5_0 {n_out}x{n_in}, {a.p} rows")
    print("  fixes  lanes ms  int8 ms  int8/lanes")
    for f in (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0):
        x = torch.randn(a.p, n_in, generator=g)
        marks = torch.rand(a.p, n_in // 32, generator=g) < f
        for r, blk in marks.nonzero().tolist():
            x[r, 32 * blk] = 30.0
        fixes = fn.lp_q8mm32_fixes(x.data_ptr(), n_in, a.p, Q8MM32_RATIO[lib.level], 1)
        tl, t8 = timed(bm, x)
        print(f"  {fixes:5.2f}  {1e3 * tl:8.2f} {1e3 * t8:8.2f}  {t8 / tl:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
