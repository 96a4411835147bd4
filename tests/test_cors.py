"""CORS as llama-server's pre-routing handler answers it (server/cors.py), through uvicorn on
127.0.0.1: the default '*' with credentials echoes the Origin, 'localhost' reflects only
localhost origins, a preflight OPTIONS is answered before the API key with the methods and
headers flags, and the flags parse (the suite's test_security test_cors_*)."""
from __future__ import annotations

import socket

import httpx
import pytest
from server_harness import serving_state, uvicorn_server

from llamapy.cli.main import build_parser
from llamapy.cli.serve import serve_settings
from llamapy.server.cors import CorsSettings


@pytest.fixture(scope="module")
def state(tiny):
    with serving_state(tiny, n_ctx=256, np_=1, api_key="k") as st:
        yield st


def test_default_echoes_origin_and_preflight_skips_api_key(state) -> None:
    state.cors = CorsSettings()
    with uvicorn_server(state) as url:
        r = httpx.options(url + "/completions", headers={"Origin": "web.mydomain.fr"})
        assert r.status_code == 200 and r.text == ""
        assert r.headers["access-control-allow-origin"] == "web.mydomain.fr"
        assert r.headers["access-control-allow-credentials"] == "true"
        assert r.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
        assert r.headers["access-control-allow-headers"] == "*"
        r = httpx.get(url + "/health", headers={"Origin": "http://a.b"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://a.b"
        r = httpx.get(url + "/v1/models", headers={"Origin": "http://a.b"})  # 401: still the header
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == "http://a.b"


@pytest.mark.parametrize("origin,allowed", [("http://localhost:8080", True), ("http://127.0.0.1", True),
                                            ("http://[::1]:3000", True), ("http://evil.com", False),
                                            ("http://localhost.evil.com", False), ("http://notlocalhost", False)])
def test_localhost_reflects_only_localhost(state, origin: str, allowed: bool) -> None:
    state.cors = CorsSettings(origins="localhost")
    with uvicorn_server(state) as url:
        r = httpx.options(url + "/completions", headers={"Origin": origin})
        assert r.status_code == 200
        assert r.headers.get("access-control-allow-origin") == (origin if allowed else None)
    state.cors = CorsSettings()


def test_flags_parse() -> None:
    a = build_parser().parse_args(["serve", "--cors-origins", "localhost", "--cors-methods", "GET",
                                   "--cors-headers", "x-a", "--no-cors-credentials"])
    assert serve_settings(a).cors == CorsSettings("localhost", "GET", "x-a", False)
    assert serve_settings(build_parser().parse_args(["serve"])).cors == CorsSettings()


def test_tools_make_the_default_localhost(state) -> None:
    """--tools (llama-server's built-in agent tools: tests/test_server_tools.py) limits the CORS default
    to localhost unless --cors-origins says otherwise (the suite's
    test_cors_origins_defaults_to_localhost_with_tools_enabled); /tools is 403 without it."""
    s = serve_settings(build_parser().parse_args(["serve", "--tools", "all"]))
    assert s.cors.origins == "localhost" and s.server_tools == ("all",)
    assert serve_settings(build_parser().parse_args(["serve", "--tools", "read_file", "--cors-origins", "*"])).cors.origins == "*"
    with pytest.raises(ValueError, match='unknown tool "rm_rf".*exec_shell_command'):
        serve_settings(build_parser().parse_args(["serve", "--tools", "read_file,rm_rf"]))
    with pytest.raises(ValueError, match="--tools-runtime docker:busybox: not supported"):
        serve_settings(build_parser().parse_args(["serve", "--tools", "all", "--tools-runtime", "docker:busybox"]))
    with uvicorn_server(state) as url:
        assert httpx.get(url + "/tools", headers={"Authorization": "Bearer k"}).status_code == 403
        state.cors, state.server_tools = s.cors, s.server_tools
        try:
            for origin, allowed in (("http://localhost:8080", True), ("http://evil.com", False)):
                r = httpx.options(url + "/completions", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
                assert r.status_code == 200 and r.headers.get("access-control-allow-origin") == (origin if allowed else None)
            r = httpx.get(url + "/tools", headers={"Authorization": "Bearer k"})
            assert r.status_code == 200 and len(r.json()) == 7
        finally:
            state.cors, state.server_tools = CorsSettings(), ()


def test_cors_proxy_forwards_only_explicit_headers(state) -> None:
    """--ui-mcp-proxy's /cors-proxy?url=...: the target (a local server here) gets only the
    x-llama-server-proxy-header-* headers, prefix dropped, never the caller's Authorization,
    Proxy-Authorization, X-Api-Key or Cookie; POST's body goes along; the target's status, body
    and headers come back but its CORS ones; 403 without the flag; a bad URL or a target that
    does not answer is a 500."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, dict[str, str], bytes]] = []

    class Capture(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append((self.command, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(201)
            self.send_header("X-Target", "yes")
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok " + body)

        do_GET = do_POST = _answer

        def log_message(self, *a) -> None:
            pass

    target = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    turl = f"http://127.0.0.1:{target.server_port}/capture?q=1"
    sent = {"Authorization": "Bearer k", "Proxy-Authorization": "Basic secret", "X-Api-Key": "k", "Cookie": "session=secret",
            "x-llama-server-proxy-header-accept": "application/json",
            "x-llama-server-proxy-header-authorization": "Bearer explicit"}
    try:
        with uvicorn_server(state) as url:
            r = httpx.get(url + "/cors-proxy", params={"url": turl}, headers=sent)
            assert r.status_code == 403 and r.json()["error"]["type"] == "feature_disabled" and not seen
            state.ui_mcp_proxy = True
            r = httpx.get(url + "/cors-proxy", params={"url": turl}, headers=sent)
            assert r.status_code == 201 and r.text == "ok " and r.headers["x-target"] == "yes", (r.status_code, r.text)
            assert "access-control-allow-origin" not in r.headers
            method, got, _ = seen[-1]
            assert method == "GET" and got["accept"] == "application/json" and got["authorization"] == "Bearer explicit"
            assert not {"proxy-authorization", "x-api-key", "cookie"} & set(got), got
            r = httpx.post(url + "/cors-proxy", params={"url": turl}, headers=sent, content=b'{"a":1}')
            assert r.status_code == 201 and r.text == 'ok {"a":1}' and seen[-1][0] == "POST"
            for bad in ("ftp://127.0.0.1/x", "127.0.0.1/x", "http://u:p@127.0.0.1/x", "http:///x"):
                r = httpx.get(url + "/cors-proxy", params={"url": bad}, headers=sent)
                assert r.status_code == 500 and "error" in r.json(), (bad, r.text)
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                dead = s.getsockname()[1]  # bound, not listening: refused
                r = httpx.get(url + "/cors-proxy", params={"url": f"http://127.0.0.1:{dead}/"}, headers=sent)
            assert r.status_code == 500 and r.text.startswith("proxy error"), r.text
    finally:
        state.ui_mcp_proxy = False
        target.shutdown()
        target.server_close()
