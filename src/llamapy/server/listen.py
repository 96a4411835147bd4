"""The listening sockets of `llamapy serve --host A,B --port P`: llama-server's --host takes a
comma-separated list of addresses, all served on one port (with --port 0, the port the first
address got).  Bad input: an OSError naming the address and port."""
from __future__ import annotations

import socket


def host_list(host: str) -> list[str]:
    """The addresses of --host, in order ("127.0.0.1,::1" -> two; brackets around IPv6 dropped)."""
    return [h.strip().strip("[]") for h in host.split(",") if h.strip()]


def bind_all(host: str, port: int) -> list[socket.socket]:
    """One listening TCP socket per address of --host, all on the same port."""
    socks: list[socket.socket] = []
    try:
        for h in host_list(host):
            family = socket.AF_INET6 if ":" in h else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind((h, port))
            except OSError as e:
                s.close()
                raise OSError(e.errno, f"--host {host} --port {port}: cannot bind {h}:{port}: {e.strerror}") from None
            s.listen(2048)
            s.set_inheritable(True)
            socks.append(s)
            port = s.getsockname()[1]  # --port 0: the others on the first one's port
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks
