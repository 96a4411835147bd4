"""The engine's heap setting (memory/heap.py): once the CPU kernels are loaded, a step's
buffers are reused from the heap instead of being mapped and page-faulted in afresh at each use,
whatever the process's own glibc settings were; LLAMAPY_HEAP=glibc leaves them alone."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# 20 buffers of 4 MiB, each written whole and freed (as a ubatch's intermediates are), after 10
# of them first (the heap grows to its working size: posix_memalign's slack keeps a freed buffer
# from fitting the next one until a few have merged); the minor page faults they cost
SCRIPT = r"""
import json, resource
import torch
from llamapy.kernels import load_kernels
ok = load_kernels() is not None
def use():
    x = torch.empty(1 << 20)
    x.fill_(1.0)
    del x
for _ in range(10):
    use()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    use()
print(json.dumps({"kernels": ok, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}))
"""


def _faults(**env: str) -> dict:
    # glibc told to map every allocation above 64 KiB on its own: each buffer faulted in afresh
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", **env))
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_kernels_keep_step_buffers_in_the_heap():
    tuned = _faults()
    if not tuned["kernels"]:
        pytest.skip("no CPU kernels here (no C compiler): nothing loads them to tune the heap")
    untouched = _faults(LLAMAPY_HEAP="glibc")
    print(f"minor faults for 20 buffers of 4 MiB: engine's heap {tuned['faults']}, glibc's as set {untouched['faults']}")
    assert untouched["faults"] >= 20  # every buffer a fresh mapping (at least one fault each)
    assert tuned["faults"] * 10 + 20 <= untouched["faults"]
