"""Run one benchmark tool as a child process: its output, exit status and peak resident set
(ru_maxrss from wait4, the child alone), killed by its own pid when it overruns."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Done:
    out: str  # stdout then stderr
    stdout: str
    rc: int
    maxrss: int  # bytes
    seconds: float


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None, check: bool = True) -> Done:
    """Run `cmd`; raise RuntimeError naming the command and its last output when rc != 0 (check)
    or when it runs past `timeout` seconds (then it is killed)."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env, text=True)
        status, ru = 0, None
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            if time.perf_counter() - t0 > timeout:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9
                fe.seek(0)
                raise RuntimeError(f"{cmd[0]} ran past {timeout:.0f} s and was killed:\n{fe.read()[-2000:]}")
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        dt = time.perf_counter() - t0
        fo.seek(0), fe.seek(0)
        so, se = fo.read(), fe.read()
    print(f"  ({dt:.1f} s, rc={p.returncode}, peak RSS {ru.ru_maxrss / 1024:.0f} MiB)", file=sys.stderr, flush=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed (rc={p.returncode}):\n{(se or so)[-3000:]}")
    return Done(so + "\n" + se, so, p.returncode, ru.ru_maxrss * 1024, dt)
