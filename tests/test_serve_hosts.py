"""`llamapy serve --host 127.0.0.1,::1`: llama-server's comma-separated --host, every address
served on the one port (a real server process; the suite's test_server_multiple_addresses)."""
from __future__ import annotations

import socket

import httpx
import pytest
from server_harness import serve_process

from llamapy.server.listen import bind_all, host_list


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_host_list_and_one_port() -> None:
    assert host_list("127.0.0.1, [::1]") == ["127.0.0.1", "::1"]
    socks = bind_all("127.0.0.1", 0)
    try:
        assert len(socks) == 1 and socks[0].getsockname()[1] > 0
    finally:
        for s in socks:
            s.close()
    with pytest.raises(OSError, match=r"--host 256\.0\.0\.1 --port 0: cannot bind 256\.0\.0\.1:0"):
        bind_all("256.0.0.1", 0)


@pytest.mark.skipif(not _ipv6_loopback(), reason="IPv6 loopback (::1) cannot be bound on this machine")
def test_serves_every_address_on_one_port(tiny_path) -> None:
    with serve_process(["-m", str(tiny_path), "-c", "256", "-np", "1", "-t", "1", "--host", "127.0.0.1,::1"]) as base:
        port = int(base.rsplit(":", 1)[1])
        for host in ("127.0.0.1", "[::1]"):
            r = httpx.get(f"http://{host}:{port}/health", timeout=30)
            assert r.status_code == 200, host
            r = httpx.post(f"http://{host}:{port}/completion", json={"prompt": "a", "n_predict": 2}, timeout=60)
            assert r.status_code == 200 and r.json()["tokens_predicted"] <= 2, host
