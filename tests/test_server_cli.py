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

from llamapy.server.settings import resolve_parallel
from server_harness import ready_url

_MAIN = """
import argparse, sys
from llamapy.cli import serve as cli_serve
ap = argparse.ArgumentParser(prog="llamapy")
sub = ap.add_subparsers(dest="cmd", required=True)
cli_serve.add_parser(sub)
a = ap.parse_args(sys.argv[1:])
sys.exit(a.fn(a))
"""


def test_resolve_parallel():
    assert resolve_parallel(None, False) == (4, True)  # auto: 4 slots, unified cache
    assert resolve_parallel(8, False) == (8, False)
    assert resolve_parallel(2, True) == (2, True)
    with pytest.raises(ValueError, match=r"-np \(0\) must be >= 1"):
        resolve_parallel(0, False)


def test_serve_settings_typed_once_and_picklable():
    """The command line parses `serve` once into a frozen ServeSettings; the server and each
    replica start from that object (Ray pickles it to the replicas' processes), never from argv."""
    import dataclasses
    import pickle

    from llamapy.cli import build_parser
    from llamapy.cli.serve import replica_argv, serve_settings
    from llamapy.replicas.app import plan_from_settings
    from llamapy.server.settings import MiB

    argv = ["serve", "-m", "x.gguf", "-c", "4096", "-np", "2", "-t", "3", "--spec-type", "ngram-simple",
            "--replicas", "2", "--port=0", "--max-body", "2", "--routing", "round-robin"]
    s = serve_settings(build_parser().parse_args(argv))
    assert (s.model, s.ctx.n_ctx, s.ctx.n_seq_max, s.ctx.n_threads, s.n_parallel, s.port) == ("x.gguf", 4096, 2, 3, 2, 0)
    assert s.context_params().kv_unified is False and s.spec.type == "ngram-simple" and s.max_body == 2 * MiB
    assert s.replicas.wanted and s.replicas.replicas == 2 and s.replicas.routing == "round-robin"
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.port = 1
    auto = serve_settings(build_parser().parse_args(["serve"]))
    assert auto.n_parallel is None and not auto.replicas.wanted
    assert (auto.context_params().n_seq_max, auto.context_params().kv_unified) == (4, True)  # llama-server's auto
    assert auto.ctx.kv_unified is False  # the settings themselves stay as typed
    own = replica_argv(argv)
    assert own == ("-m", "x.gguf", "-c", "4096", "-np", "2", "-t", "3", "--spec-type", "ngram-simple", "--max-body", "2")
    plan = plan_from_settings(s, own)
    assert (plan.replicas, plan.routing, plan.n_parallel, plan.max_queue, plan.threads) == (2, "round-robin", 2, 8, 3)
    assert pickle.loads(pickle.dumps(plan)) == plan and plan.serve is s
    with pytest.raises(ValueError, match=r"--max-queue \(-1\) must be >= 0"):
        serve_settings(build_parser().parse_args(["serve", "--max-queue", "-1"])).check()


def _start(args: list[str]) -> tuple[subprocess.Popen, str, list[str]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", _MAIN, "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    if (base := ready_url(proc, 60, lines)) is not None:
        return proc, base, lines
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


def test_llama_server_flags_n_probs_threads_http_log_disable(tiny_path):
    """llama-server's --n-probs (a request's default n_probs on /completion), --threads-http
    (accepted) and --log-disable (no log line: the process prints its `ready:` line only, and
    nothing on SIGTERM) on a real `llamapy serve` process."""
    proc, base, lines = _start(["-m", str(tiny_path), "-c", "512", "-np", "1", "--port", "0", "-t", "1",
                                "--n-probs", "2", "--threads-http", "4", "--log-disable"])
    try:
        assert len(lines) == 1 and lines[0].startswith("ready: "), lines  # no log line before it
        with httpx.Client(base_url=base, timeout=60) as c:
            req = {"prompt": "a b", "n_predict": 2, "temperature": 0.0}
            body = c.post("/completion", json=req).json()
            assert [len(p["top_logprobs"]) for p in body["completion_probabilities"]] == [2, 2]
            assert body["generation_settings"]["n_probs"] == 2
            assert "completion_probabilities" not in c.post("/completion", json=req | {"n_probs": 0}).json()  # the request's wins
            assert c.get("/props").json()["default_generation_settings"]["params"]["n_probs"] == 2
            assert c.post("/v1/completions", json={"prompt": "a", "max_tokens": 1}).json()["choices"][0]["logprobs"] is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stdout.read() == ""  # no "server stopped" line either
    finally:
        if proc.poll() is None:
            proc.kill()
    with pytest.raises(ValueError, match=r"--n-probs \(101\) must be in \[0, 100\]"):
        from llamapy.cli import build_parser
        from llamapy.cli.serve import serve_settings

        serve_settings(build_parser().parse_args(["serve", "--n-probs", "101"]))


def test_response_header_names_keep_llama_servers_case(tiny_path):
    """Header names on the wire as llama-server writes them (`Process-Start-Time-Unix` on
    /metrics, `Access-Control-Allow-Origin`, `Content-Type`): llama.cpp's server tests copy the
    headers into a plain dict and look those names up in that case (server/header_case.py and
    uvicorn's h11 protocol in cli/serve.py)."""
    import http.client
    from urllib.parse import urlsplit

    proc, base, _ = _start(["-m", str(tiny_path), "-c", "256", "-np", "1", "--port", "0", "-t", "1", "--metrics"])
    try:
        u = urlsplit(base)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", "/metrics", headers={"Origin": "http://localhost:8080"})
        r = conn.getresponse()
        r.read()
        names = [k for k, _ in r.getheaders()]
        assert r.status == 200
        assert {"Process-Start-Time-Unix", "Access-Control-Allow-Origin", "Content-Type"} <= set(names), names
        assert dict(r.getheaders())["Access-Control-Allow-Origin"] == "http://localhost:8080"
        conn.close()
    finally:
        proc.kill()
        proc.wait(30)
