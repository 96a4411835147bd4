"""Model.load in the file's own memory, counted as the operating system counts it: in a fresh
process (tests/load_probe.py), the resident set grows by at most 1.1x the GGUF file and
peaks (VmHWM) at most 1.1x the file + 64 MiB above where it started, for SmolLM2 and Gemma 3,
with the default loading (the vocabulary read into 2 MiB pages where the kernel has them,
model/huge_pages.py) and with --mmap."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamapy.model.huge_pages import thp_available

PROBE = Path(__file__).with_name("load_probe.py")
MiB = 1024 * 1024


def _probe(path: Path, *extra: str) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536",  # freed buffers leave RSS: VmHWM sees the true peak
               LLAMAPY_HEAP="glibc")  # (the engine keeps that setting: memory/heap.py)
    r = subprocess.run([sys.executable, str(PROBE), str(path), *extra], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset VmHWM")
@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_load_grows_the_process_by_about_the_file(which, smollm2_path, gemma3_path):
    m = _probe(smollm2_path if which == "smollm2" else gemma3_path)
    f = m["file"]
    print(f"{which}: file {f / MiB:.1f} MiB, growth {m['growth'] / MiB:.1f} MiB ({m['growth'] / f:.2f}x), "
          f"peak {m['peak'] / MiB:.1f} MiB, stacked {m['stacked'] / MiB:.1f} MiB")
    assert m["growth"] <= 1.1 * f
    assert m["peak"] <= 1.1 * f + 64 * MiB
    assert m["resident"] <= 1.1 * f  # the weights as kept: the file's blocks
    if thp_available():  # the vocabulary (28 / 170 MiB) read into the weight arena; its 2 MiB
        assert m["arena"] >= 24 * MiB, m  # pages: tests/test_huge_pages.py


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset VmHWM")
def test_mmap_keeps_the_weights_mapped(smollm2_path):
    """--mmap (llama.cpp's default): only the stacks are read; the rest stays mapped, joining the
    process as it is read, so loading grows it by the stacks and the vocabulary, not the file."""
    m = _probe(smollm2_path, "--mmap")
    f = m["file"]
    assert 0 < m["stacked"] < 0.6 * f and m["arena"] == 0 and m["huge"] < 4 * MiB, m
    assert m["growth"] <= m["stacked"] + 0.35 * f, m
