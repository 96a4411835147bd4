"""The process's own memory as the operating system counts it (Linux /proc/self/status), for
the probes the memory tests run as subprocesses (load_probe.py, peak_probe.py)."""
from __future__ import annotations


def status(key: str) -> int:
    """Bytes of a /proc/self/status field given in kB (VmRSS, VmHWM, ...)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def huge_bytes() -> int:
    """Bytes of the process's anonymous memory in transparent huge pages (smaps_rollup)."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) * 1024
    return 0
