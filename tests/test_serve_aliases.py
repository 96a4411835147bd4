"""`llamapy serve --alias a,b,c --tags x,y`: llama-server's comma-separated aliases (a set: the
first in sorted order is the model's id) and informational tags, listed by /v1/models (a real
server process; the suite's test_server_model_aliases_and_tags)."""
from __future__ import annotations

import httpx
from server_harness import serve_process

from llamapy.server.startup import split_names


def test_split_names() -> None:
    assert split_names(" b, a ,,b") == ("a", "b")
    assert split_names(None) == ()


def test_models_lists_aliases_and_tags(tiny_path) -> None:
    args = ["-m", str(tiny_path), "-c", "256", "-np", "1", "-t", "1", "--alias", "tinyllama-2,fim,code",
            "--tags", "chat,fim,small"]
    with serve_process(args) as base:
        for path in ("/models", "/v1/models"):
            data = httpx.get(base + path, timeout=30).json()["data"]
            assert len(data) == 1
            assert data[0]["id"] == "code" and set(data[0]["aliases"]) == {"tinyllama-2", "fim", "code"}
            assert set(data[0]["tags"]) == {"chat", "fim", "small"}
        r = httpx.post(base + "/v1/completions", json={"prompt": "a", "max_tokens": 1}, timeout=60)
        assert r.json()["model"] == "code"
