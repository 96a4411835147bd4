"""Run as a subprocess by test_workspace_peak.py: decode one full ubatch at the largest n_kv
and print the resident-memory high-water mark of that decode next to the reservation.

glibc is told (MALLOC_MMAP_THRESHOLD_, set by the caller, with LLAMAPY_HEAP=glibc so that the
engine keeps it: memory/heap.py) to map every allocation above 64 KiB on its own, so freed
intermediates leave RSS and VmHWM sees the true peak.  The weights
are views of the mapped file, whose pages join RSS when first read: the filling decode reads
every matrix (one output row included) so the measured one sees only its own buffers."""
from __future__ import annotations

import json
import random
import sys

from proc_status import status

import llamapy




def main() -> None:
    path, fa, n_ctx, n_ubatch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    model = llamapy.Model.load(path, device="cpu")
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=n_ctx, n_ubatch=n_ubatch, n_batch=n_ctx, flash_attn=fa))
    toks = [random.Random(0).randrange(model.n_vocab) for _ in range(n_ctx)]
    b = llamapy.Batch()
    for i in range(n_ctx - n_ubatch):  # fill the cache, so the measured ubatch sees n_kv = n_ctx;
        b.add(toks[i], i, [0], logits=i == n_ctx - n_ubatch - 1)  # one output: every weight page read once
    ctx.decode(b)
    b = llamapy.Batch()
    for i in range(n_ctx - n_ubatch, n_ctx):
        b.add(toks[i], i, [0], logits=i == n_ctx - 1)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    rss0 = status("VmRSS")
    ctx.decode(b)
    print(json.dumps({"peak": status("VmHWM") - rss0, "reserved": ctx.memory_report()["compute"], "n_kv": ctx.memory.n_kv(0)}))


if __name__ == "__main__":
    main()
