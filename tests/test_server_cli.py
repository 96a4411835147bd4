"""`llamapy serve` as a process: startup lines, a ready URL, and SIGTERM mid-stream ending the
stream with a final event and the process with exit code 0."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from llamapy.cli_serve import resolve_parallel

_MAIN = """
import argparse, sys
from llamapy import cli, cli_serve
ap = argparse.ArgumentParser(prog="llamapy")
sub = ap.add_subparsers(dest="cmd", required=True)
cli_serve.add_parser(sub, cli)
a = ap.parse_args(sys.argv[1:])
sys.exit(a.fn(a))
"""


def test_resolve_parallel():
    assert resolve_parallel(None, False) == (4, True)  # auto: 4 slots, unified cache
    assert resolve_parallel(8, False) == (8, False)
    assert resolve_parallel(2, True) == (2, True)
    with pytest.raises(ValueError, match=r"-np \(0\) must be >= 1"):
        resolve_parallel(0, False)


def _start(args: list[str]) -> tuple[subprocess.Popen, str, list[str]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", _MAIN, "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if m := re.match(r"ready: (http://127\.0\.0\.1:\d+)$", lines[-1]):
            return proc, m.group(1), lines
    proc.kill()
    raise AssertionError("no ready line:\n" + "\n".join(lines))


def test_serve_process_sigterm_mid_stream(tiny_path):
    """A stream that cannot end within --shutdown-timeout 1 (EOS ignored, 16384 cells: the tiny
    model needs several seconds to fill them) gets the shutdown's error event, then [DONE]."""
    proc, base, lines = _start(["-m", str(tiny_path), "-c", "32768", "-np", "2", "--port", "0", "--metrics", "-t", "1",
                                "--shutdown-timeout", "1"])
    try:
        text = "\n".join(lines)
        assert "slots, each holds 16384 cells (-c 32768 / -np 2)" in text
        assert "llama_kv_cache: size" in text and "srv: load_model: memory:" in text
        assert re.search(r"main: server is listening on http://127\.0\.0\.1:\d+ - starting the main loop", text)
        events: list[str] = []
        with httpx.Client(base_url=base, timeout=60) as c:
            assert c.get("/health").json() == {"status": "ok"}
            with c.stream("POST", "/v1/completions", json={"prompt": "hi", "max_tokens": 100000, "stream": True,
                                                           "temperature": 1.0, "stop": [], "ignore_eos": True}) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                        if len(events) == 3:
                            proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last.get("error", {}).get("message") == "server is shutting down", last


def test_sigterm_drains_then_exits_0(tiny_path):
    """SIGTERM: a new request gets 503 at once, the in-flight one finishes its tokens within
    --shutdown-timeout, and the process exits 0."""
    proc, base, _ = _start(["-m", str(tiny_path), "-c", "8192", "-np", "2", "--port", "0", "-t", "1",
                            "--shutdown-timeout", "30"])
    try:
        events: list[dict] = []
        late: list[httpx.Response] = []
        with httpx.Client(base_url=base, timeout=60) as c:
            with c.stream("POST", "/v1/completions", json={"prompt": "hi", "max_tokens": 3000, "stream": True,
                                                           "temperature": 1.0, "ignore_eos": True}) as r:
                for line in r.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        events.append(json.loads(line[6:]))
                        if len(events) == 2:
                            proc.send_signal(signal.SIGTERM)
                            with httpx.Client(base_url=base, timeout=10) as c2:  # draining: /health says 503 too
                                deadline = time.monotonic() + 10
                                while c2.get("/health").status_code != 503 and time.monotonic() < deadline:
                                    time.sleep(0.05)
                                late.append(c2.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}))
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert late[0].status_code == 503 and late[0].json()["error"]["message"] == "server is shutting down"
    assert events[-1]["choices"][0]["finish_reason"] == "length" and events[-1]["usage"]["completion_tokens"] == 3000
