"""One child process for the built-in tools (llama-server's run_subprocess in
tools/server/server-tools.cpp): stdout and stderr combined, read as raw bytes as they come,
kept up to `max_output` bytes (then `\\n[output truncated]`, the pipe still drained so the
child never blocks), killed when `timeout` seconds pass or the chunk sink says the client
has gone.  The child leads its own process group, so the kill reaches what it started.
A child that did not exit by itself (killed) reports exit code 1, as llama-server's
subprocess.h (EXIT_FAILURE when !WIFEXITED); one that could not start: -1 and
`failed to spawn process`."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass

from .tools_base import ChunkSink

READ_CHUNK = 4096  # bytes per read, as llama-server's buffer


@dataclass
class ExecResult:
    output: str = ""
    exit_code: int = -1
    timed_out: bool = False


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def run_subprocess(args: list[str], max_output: int, timeout: float, on_chunk: ChunkSink | None = None,
                   cwd: str = "") -> ExecResult:
    """Run `args` (searched on PATH, the server's environment) in `cwd` (empty: the server's)."""
    res = ExecResult()
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=cwd or None, start_new_session=True)
    except (OSError, ValueError):
        res.output = "failed to spawn process"
        return res
    done = threading.Event()
    timed_out = threading.Event()

    def watchdog() -> None:
        if not done.wait(max(0.0, timeout)):
            timed_out.set()
            _kill(proc)

    dog = threading.Thread(target=watchdog, name="tool-timeout", daemon=True)
    dog.start()
    out = bytearray()
    truncated = False
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        buf = os.read(fd, READ_CHUNK)
        if not buf:
            break
        if truncated:
            continue
        if len(out) + len(buf) <= max_output:
            out += buf
            if on_chunk is not None and not on_chunk(_text(buf)):
                _kill(proc)
                break
        else:
            rest = buf[:max(0, max_output - len(out))]
            out += rest
            if on_chunk is not None and rest:
                on_chunk(_text(rest))
            truncated = True
    done.set()
    dog.join()
    proc.stdout.close()
    rc = proc.wait()
    if rc < 0:  # a signal ended it: not WIFEXITED
        _kill(proc)
        rc = 1
    res.exit_code = rc
    res.output = _text(bytes(out)) + ("\n[output truncated]" if truncated else "")
    res.timed_out = timed_out.is_set()
    return res
