"""Run as a subprocess by test_load_memory.py: the process memory Model.load adds, as the
operating system counts it (VmRSS, VmHWM), printed as one JSON line.

torch, llamapy's kernel library and the tokenizer's libraries are loaded first, so the
"before" reading has them and the figures are Model.load's own.  "after_read" is the
resident set once every weight the model keeps has been read once (one decode of one
token), the figure `llamapy mem` predicts; the context it needs is measured separately and
subtracted.  "huge": the growth of its anonymous memory in 2 MiB pages (the weight arena,
model/huge_pages.py); `--mmap` loads with the weights mapped instead."""
from __future__ import annotations

import json
import sys

from proc_status import huge_bytes, status




def main() -> None:
    path = sys.argv[1]
    import jinja2  # noqa: F401  (the chat template's library)
    import tokenizers  # noqa: F401
    import torch  # noqa: F401

    import llamapy
    from llamapy.kernels import load_kernels
    from llamapy.model import model as _model  # noqa: F401  (the engine's modules, not their data)

    load_kernels()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    rss0, huge0 = status("VmRSS"), huge_bytes()
    model = llamapy.Model.load(path, device="cpu", mmap=True if "--mmap" in sys.argv else None)
    rss1, hwm = status("VmRSS"), status("VmHWM")
    out = {"file": model.path.stat().st_size, "growth": rss1 - rss0, "peak": hwm - rss0,
           "stacked": model.n_bytes_stacked, "resident": model.n_bytes_resident, "arena": model.n_bytes_arena,
           "huge": huge_bytes() - huge0}
    if "--decode" in sys.argv:
        ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=256, n_batch=256, n_ubatch=256))
        b = llamapy.Batch()
        b.add(model.tokenizer.bos if model.tokenizer.bos is not None else 0, 0, [0], logits=True)
        rss2 = status("VmRSS")
        ctx.decode(b)
        out["after_read"] = status("VmRSS") - rss0 - (rss2 - rss1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
