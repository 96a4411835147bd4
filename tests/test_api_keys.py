"""Several API keys as llama-server takes them: `--api-key a,b` and `--api-key-file` (one per
line, '#' comments), any of them accepted (Bearer or x-api-key), checked on a real uvicorn
server on 127.0.0.1."""
from __future__ import annotations

import httpx
import pytest
from server_harness import serving_state, uvicorn_server

from llamapy.cli.main import build_parser
from llamapy.cli.serve import api_keys, serve_settings


def test_keys_from_flag_and_file(tmp_path) -> None:
    f = tmp_path / "keys"
    f.write_text("# team keys\nk-file-1\n\nk-file-2\n")
    assert api_keys("a, b", None) == ("a", "b")
    assert api_keys("a", str(f)) == ("a", "k-file-1", "k-file-2")
    a = build_parser().parse_args(["serve", "--api-key-file", str(f)])
    assert serve_settings(a).api_keys == ("k-file-1", "k-file-2")
    with pytest.raises(ValueError, match=r"--api-key-file: failed to open file '.*nope'"):
        api_keys(None, str(tmp_path / "nope"))


def test_any_key_is_accepted_on_a_real_server(tiny) -> None:
    with serving_state(tiny, n_ctx=256, np_=1) as st:
        st.api_keys = ("k-one", "k-two")
        with uvicorn_server(st) as url:
            for key in ("k-one", "k-two"):
                assert httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
                assert httpx.get(url + "/v1/models", headers={"x-api-key": key}).status_code == 200
            for bad in ({"Authorization": "Bearer k-three"}, {"Authorization": "Bearer k-one,k-two"}, {}):
                r = httpx.get(url + "/v1/models", headers=bad)
                assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
