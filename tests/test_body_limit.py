"""--max-body against clients that send the whole body before reading the answer (urllib,
requests, httpx): a body 4x the limit is a 413 with the error JSON, not a connection reset;
and a huge body is not read forever (the drain after the 413 is bounded)."""
from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import httpx
import pytest
from server_harness import uvicorn_server

from llamapy.server.bridge import ServerState

MiB = 1024 * 1024
LIMIT = 4 * MiB
BIG = b'{"prompt": "' + b"x" * (4 * LIMIT) + b'"}'  # 4x the limit: more than the socket buffers hold


@pytest.fixture(scope="module")
def base():
    """A real server (uvicorn on 127.0.0.1) with --max-body 4 MiB; no model is needed: the
    limit answers before any route."""
    with uvicorn_server(ServerState(max_body=LIMIT)) as url:
        yield url


def _check_413(status: int, body: bytes) -> None:
    assert status == 413
    err = json.loads(body)["error"]
    assert err["code"] == 413 and "the limit is 4,194,304 bytes" in err["message"]


def test_urllib_gets_413(base):
    req = urllib.request.Request(base + "/v1/completions", data=BIG, headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    _check_413(e.value.code, e.value.read())


def test_requests_gets_413(base):
    requests = pytest.importorskip("requests")
    r = requests.post(base + "/v1/completions", data=BIG, headers={"content-type": "application/json"}, timeout=30)
    _check_413(r.status_code, r.content)


def test_httpx_gets_413(base):
    r = httpx.post(base + "/v1/completions", content=BIG, headers={"content-type": "application/json"}, timeout=30)
    _check_413(r.status_code, r.content)


def test_chunked_body_gets_413(base):
    """No Content-Length: refused past the limit, the rest drained, the 413 arrives."""
    def chunks():
        for _ in range(4 * 16):
            yield b"x" * (LIMIT // 16)
    r = httpx.post(base + "/v1/completions", content=chunks(), headers={"content-type": "application/json"}, timeout=30)
    _check_413(r.status_code, r.content)


def test_huge_body_is_not_read_forever(base):
    """A 64 MiB body streamed over a raw socket: the server stops reading after its drain
    budget (DRAIN_FACTOR x the limit), so the client cannot send it all, and soon."""
    huge, chunk = 64 * MiB, b"x" * (256 * 1024)
    u = urlsplit(base)
    sent, t0 = 0, time.monotonic()
    with socket.create_connection((u.hostname, u.port), timeout=20) as s:
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {huge}\r\n\r\n".encode())
        with pytest.raises(OSError):  # EPIPE / ECONNRESET once the server has closed
            while sent < huge:
                sent += s.send(chunk)
            s.recv(1)  # (not reached when the server is bounded)
            raise AssertionError("the server read the whole 64 MiB body")
    assert sent < huge  # it stopped after its budget (DRAIN_FACTOR x the limit, plus what the socket buffers held)
    assert time.monotonic() - t0 < 15
    r = httpx.get(base + "/health", timeout=10)  # the server still answers
    assert r.status_code == 503  # (no model: "Loading model")
