"""This test run's own processes, found by walking /proc (no psutil, no machine-wide pgrep):
the children of a pid, and the processes that carry an environment tag the test gave the
process it started (inherited by everything that process starts, even after it exits and
its children are re-parented)."""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

TAG_VAR = "LLAMAPY_TEST_RUN_TAG"


def new_tag_env() -> tuple[str, dict[str, str]]:
    """(a fresh tag, os.environ plus that tag) for a subprocess the test starts."""
    tag = uuid.uuid4().hex
    return tag, dict(os.environ, **{TAG_VAR: tag})


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _read(pid: int, what: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes()
    except OSError:  # gone, or another user's
        return b""


def _running(pid: int) -> bool:
    stat = _read(pid, "stat")
    return bool(stat) and stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def tagged(tag: str, cmd_part: str = "") -> list[int]:
    """Running (not zombie) processes whose environment has TAG_VAR=tag and whose command line
    contains cmd_part."""
    want = f"{TAG_VAR}={tag}".encode()
    return [pid for pid in _pids() if want in _read(pid, "environ").split(b"\0")
            and cmd_part.encode() in _read(pid, "cmdline").replace(b"\0", b" ") and _running(pid)]


def children(ppid: int, cmd_part: str = "") -> list[int]:
    """Running direct children of ppid whose command line contains cmd_part."""
    out = []
    for pid in _pids():
        stat = _read(pid, "stat")
        if stat and int(stat.rsplit(b")", 1)[1].split()[1]) == ppid and _running(pid) \
                and cmd_part.encode() in _read(pid, "cmdline").replace(b"\0", b" "):
            out.append(pid)
    return out


def wait_gone(tag: str, cmd_part: str = "", timeout_s: float = 30) -> list[int]:
    """Wait until no running process carries the tag (and cmd_part); those still left."""
    deadline = time.monotonic() + timeout_s
    while (left := tagged(tag, cmd_part)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
