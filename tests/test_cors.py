"""CORS as llama-server's pre-routing handler answers it (server/cors.py), through uvicorn on
127.0.0.1: the default '*' with credentials echoes the Origin, 'localhost' reflects only
localhost origins, a preflight OPTIONS is answered before the API key with the methods and
headers flags, and the flags parse (the suite's test_security test_cors_*)."""
from __future__ import annotations

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
