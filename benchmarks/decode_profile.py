#!/usr/bin/env python3
"""Where a decode step's time goes: B sequences, one token each per step, after a prompt of
-p tokens per sequence, timed over -n steps; then llamapy's CPU kernels (kernels/c/, which
torch.profiler cannot see) timed per function and matrix shape, with the steps' time outside
them, and torch.profiler's table of the top PyTorch ops over a few more steps.

    .venv/bin/python benchmarks/decode_profile.py -B 1       # single-stream decode (tg)
    .venv/bin/python benchmarks/vs_llamacpp.py ...          # the ratios; this says why
    .venv/bin/python benchmarks/decode_profile.py -B 16      # batched decode, unified cache
    .venv/bin/python benchmarks/decode_profile.py -m gemma3-270m -p 512 --prefill -n 3   # a prompt's ubatch
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("-B", type=int, default=1, help="parallel sequences")
    ap.add_argument("-p", type=int, default=128, help="prompt tokens per sequence")
    ap.add_argument("-n", type=int, default=32, help="timed steps")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=12, help="profiler table rows")
    ap.add_argument("--prefill", action="store_true",
                    help="time and profile the prompt's decode (B sequences of -p tokens, -n times) instead of the steps")
    ap.add_argument("--per-op", action="store_true",
                    help="llama: run the per-op path (each kernel timed) instead of all layers in one C call")
    a = ap.parse_args(argv)

    import torch
    from torch.profiler import profile

    import llamapy
    from llamapy.kernels import load_kernels

    logging.getLogger("llamapy").setLevel(logging.ERROR)
    torch.set_num_threads(a.threads)
    model = llamapy.Model.load(a.model)
    if a.per_op and getattr(model.net, "fused", None) is not None:
        model.net.fused = None
    n_ctx = a.B * (a.p + a.n + 64) + 256  # the timed steps, the warm-up and the profiled ones
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=n_ctx, n_seq_max=a.B, kv_unified=True, n_threads=a.threads))
    def prompt() -> None:
        ctx.memory.clear()
        b = llamapy.Batch()
        for s in range(a.B):
            for i in range(a.p):
                b.add((7 + 31 * s + i) % model.n_vocab, i, [s], logits=i == a.p - 1)
        ctx.decode(b)

    prompt()
    pos = a.p

    def decode_step() -> None:
        nonlocal pos
        b = llamapy.Batch()
        for s in range(a.B):
            b.add(5, pos, [s], logits=True)
        ctx.decode(b)
        pos += 1

    step = prompt if a.prefill else decode_step

    for _ in range(3):
        step()
    lib = load_kernels()
    if lib is not None:  # time each C call (a wrapper around the ctypes functions, then removed)
        stats: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        fn = lib.fn

        class Timed:
            def __getattr__(self, name):
                f = getattr(fn, name)

                def call(*args):
                    t = time.perf_counter()
                    r = f(*args)
                    key = f"{name}[{_type_name(args[0])} {args[2]}x{args[3]}]" if name == "lp_mm" else name
                    stats[key][0] += 1
                    stats[key][1] += time.perf_counter() - t
                    return r
                return call

        object.__setattr__(lib, "fn", Timed())
        t0 = time.perf_counter()
        for _ in range(a.n):
            step()
        whole = (time.perf_counter() - t0) / a.n
        object.__setattr__(lib, "fn", fn)
        print(f"llamapy CPU kernels over {a.n} steps (ms per step):")
        for key, (n, t) in sorted(stats.items(), key=lambda kv: -kv[1][1]):
            print(f"  {key:<24} {n / a.n:6.1f} calls  {t / a.n * 1e3:8.3f} ms")
        in_c = sum(t for _, t in stats.values()) / a.n
        print(f"  these steps: {whole * 1e3:.3f} ms each, {in_c * 1e3:.3f} in the kernels, "
              f"{(whole - in_c) * 1e3:.3f} outside them (Python, PyTorch's ops, the batch and the cache)")
    t0 = time.perf_counter()
    for _ in range(a.n):
        step()
    dt = (time.perf_counter() - t0) / a.n
    done = a.B * a.p if a.prefill else a.B
    print(f"B={a.B}, prompt {a.p}{' (timed)' if a.prefill else ''}: {dt * 1e3:.2f} ms per step, {done / dt:.1f} t/s")
    n_prof = 1 if a.prefill else 8
    with profile() as prof:
        for _ in range(n_prof):
            step()
    print(f"top ops over {n_prof} steps (self CPU time):")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))
    return 0


def _type_name(t) -> str:
    """A GGML type id (an int, or a ctypes c_int) as its name, e.g. Q4_K."""
    import gguf

    v = int(getattr(t, "value", t))
    try:
        return gguf.GGMLQuantizationType(v).name
    except ValueError:
        return str(v)


if __name__ == "__main__":
    sys.exit(main())
