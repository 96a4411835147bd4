#!/usr/bin/env python3
"""A warm process for scripts/llama_server_suite.sh: llama.cpp's server suite starts a fresh
server for nearly every test, and a fresh `python -m llamapy serve` spends most of its start
importing Python (torch, FastAPI, uvicorn, llamapy: 1.5-2 s on an idle 2-core machine, several
times that while the cores are shared).  This process imports all of that once, computes nothing
(no torch op runs here, so no thread pool exists to be lost in a fork), and listens on a unix
socket.  For each connection from scripts/llama_server_launcher.py (which the suite execs as
llama-server) it forks:

  zygote --fork--> manager --fork--> server
  the manager receives the launcher's argv, environment, cwd and its stdin/stdout/stderr (fds
  passed over the socket); the server child takes them, maps the suite's presets exactly as the
  launcher does (llama_server_launcher.build) and runs llamapy's CLI main(["serve", ...]): the same
  `llamapy serve` code path and flags as an exec, minus the imports.  The manager relays: the
  launcher's SIGTERM/SIGINT -> the server; the launcher gone (SIGKILL) -> SIGKILL; the server's
  exit status -> the launcher, which exits with it.

    llama_server_zygote.py SOCKET_PATH        (runs until killed; removes SOCKET_PATH first)

Module-level state is as a fresh import leaves it: the zygote never serves, loads or times
anything.  Environment variables that llamapy reads at import time are the zygote's (the suite
script starts it with the suite's environment); those read later are the launcher's."""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRELOAD = ("torch", "numpy", "fastapi", "starlette", "uvicorn", "uvicorn.config", "uvicorn.main",
           "uvicorn.protocols.http.httptools_impl", "uvicorn.protocols.http.h11_impl", "uvicorn.loops.auto",
           "uvicorn.lifespan.on", "jinja2", "tokenizers", "llamapy.cli.main", "llamapy.cli.serve",
           "llamapy.server.http", "llamapy.server.startup", "llamapy.server.scheduler", "llama_server_launcher")


def preload() -> None:
    """Import what `llamapy serve` imports, and every llamapy module that imports cleanly
    (Ray's replicas, the torchrun pipeline stage and __main__ aside: serve never takes them here)."""
    import importlib
    import pkgutil

    sys.path[:0] = [str(REPO / "src"), str(REPO / "scripts")]
    for name in PRELOAD:
        importlib.import_module(name)
    import llamapy

    for m in pkgutil.walk_packages(llamapy.__path__, "llamapy."):
        if m.name.startswith(("llamapy.replicas", "llamapy.pipeline.stage")) or m.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(m.name)
        except Exception as e:  # noqa: BLE001 - an optional dependency missing: the child imports it (or not) itself
            print(f"zygote: not preloaded: {m.name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)


def recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """One length-prefixed JSON request and the 3 fds that came with its first bytes."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError("launcher closed the socket mid-request")
        data += more
    return json.loads(data[4:4 + struct.unpack("!I", data[:4])[0]]), list(fds)


def run_server(req: dict, fds: list[int]) -> int:
    """In the server child: the launcher's stdio, environment, cwd; then llamapy serve."""
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from llama_server_launcher import build
    from llamapy.cli.main import main

    args = build(req["argv"], False)
    prog = ["llamapy", "serve"]
    sys.argv = prog + args
    print(f"launcher: zygote fork (pid {os.getpid()}): {' '.join(prog + args)}", file=sys.stderr, flush=True)
    try:
        return main(["serve", *args])
    except SystemExit as e:  # argparse's errors
        return e.code if isinstance(e.code, int) else 1


def manage(conn: socket.socket) -> None:
    """In the manager: fork the server, relay signals in and the exit status out."""
    req, fds = recv_request(conn)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        conn.close()
        rc = 1
        try:
            rc = run_server(req, fds)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    for fd in fds:
        os.close(fd)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            conn.sendall(struct.pack("!i", rc if rc >= 0 else 128 - rc))
            return
        if select.select([conn], [], [], 0.05)[0]:
            msg = conn.recv(1)
            sig = {b"T": signal.SIGTERM, b"I": signal.SIGINT}.get(msg, signal.SIGKILL)  # b"": the launcher is gone
            os.kill(pid, sig)
            if not msg:
                os.waitpid(pid, 0)
                return


def main() -> None:
    path = sys.argv[1]
    preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # managers are reaped by the kernel
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    print(f"zygote: ready on {path} (pid {os.getpid()})", file=sys.stderr, flush=True)
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            srv.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                manage(conn)
            finally:
                os._exit(0)
        conn.close()


if __name__ == "__main__":
    main()
