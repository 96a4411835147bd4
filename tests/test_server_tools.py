"""--tools: llama-server's built-in agent tools at GET/POST /tools (server/tools_*.py), through a
real uvicorn server on SmolLM2, against llama-server's own answers to the same requests on the
same tree (tests/data/server_tools_ref.json, written by scripts/ref_server_tools.py): the list
per enabled set, read_file line ranges and limits, glob include/exclude/type/depth with junk
directories listed but not walked, grep context/ignore_case/literal, write then edit (fuzzy too),
exec's exit code, output cap, timeout and stream, get_info, the errors; a tool not enabled and
a server without --tools refuse.  Then what the reference cannot show: .gitignore through git,
a timeout that kills the whole command at once, a streaming client that leaves."""
from __future__ import annotations

import importlib.util

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from server_harness import serving_state, uvicorn_server

REF = json.loads((Path(__file__).parent / "data/server_tools_ref.json").read_text())
TOOLS_FLAG = {"all": ("all",), "some": ("read_file", "get_info"), "none": ()}


@pytest.fixture(scope="module")
def served(smollm2):
    with serving_state(smollm2, n_ctx=256, np_=1) as st, uvicorn_server(st) as url:
        yield st, url


def _script():
    """scripts/ref_server_tools.py, which wrote the reference: its tree writer and {ROOT} substitution."""
    spec = importlib.util.spec_from_file_location("ref_server_tools", Path(__file__).resolve().parent.parent
                                                  / "scripts" / "ref_server_tools.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF_SCRIPT = _script()
subst = REF_SCRIPT.subst


def write_tree(root: Path) -> None:
    for rel, text in REF["tree"].items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def ask(c: httpx.Client, req: dict, root: str) -> dict:
    headers = {"x-tool-cwd": root, **subst(req["headers"], root)}
    r = c.post("/tools", json=subst(req["body"], root), headers=headers)
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        events = [json.loads(ln[6:]) for ln in r.text.split("\n") if ln.startswith("data: ")]
        chunks = "".join(e.get("chunk", "") for e in events)  # chunking is the pipe's, not the API's
        return subst({"status": r.status_code, "text": chunks, "last": events[-1]}, root, back=True)
    return subst({"status": r.status_code, "body": r.json()}, root, back=True)


def canon(answer: dict, mode: str) -> dict:
    """What must agree under the request's compare mode (see scripts/ref_server_tools.py)."""
    if "events" in answer:
        ev = answer["events"]
        return {"status": answer["status"], "text": "".join(e.get("chunk", "") for e in ev), "last": ev[-1]}
    body = answer["body"]
    if mode == "keys":
        return {"status": answer["status"], "keys": sorted(body), "cwd": body.get("cwd")}
    if mode == "error_prefix" and "error" in body:
        return {"status": answer["status"], "error": body["error"].split(":")[0]}
    if mode in ("sorted", "tail") and "plain_text_response" in body:
        head, _, tail = body["plain_text_response"].partition("\n---\n")
        out = dict(body, plain_text_response=tail)
        if mode == "sorted":
            out["lines"] = sorted(head.split("\n"))
            out["entries"] = sorted(body.get("entries", []), key=lambda e: e["path"])
        else:
            out["entries"] = len(body.get("entries", []))
        return {"status": answer["status"], "body": out}
    return answer


@pytest.mark.slow
@pytest.mark.parametrize("case", ["all", "some", "none"])
def test_matches_llama_server(served, tmp_path, case: str) -> None:
    st, url = served
    ref = REF["cases"][case]
    st.server_tools = TOOLS_FLAG[case]
    try:
        write_tree(tmp_path)
        with httpx.Client(base_url=url, timeout=60) as c:
            g = c.get("/tools")
            want_get = ref["get"]
            assert (g.status_code, g.json()) == (want_get["status"], want_get["body"])
            for req in ref["requests"]:
                got = ask(c, req, str(tmp_path))
                want = canon(req["answer"], req["compare"])
                assert canon({"events": [{"chunk": got["text"]}, got["last"]], "status": got["status"]}
                             if "text" in got else got, req["compare"]) == want, req["body"]
    finally:
        st.server_tools = ()


def call(url: str, tool: str, params: dict, cwd: Path, **kw) -> dict:
    r = httpx.post(url + "/tools", json={"tool": tool, "params": params, **kw}, headers={"x-tool-cwd": str(cwd)}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.slow
def test_gitignore_applies_through_git(served, tmp_path) -> None:
    """Inside a git work tree files come from `git ls-files --cached --others --exclude-standard`:
    a .gitignore'd file is neither listed nor grepped (the walker alone would show it)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the listing falls back to the walker")
    st, url = served
    st.server_tools = ("all",)
    try:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        (tmp_path / ".gitignore").write_text("secret.txt\n")
        (tmp_path / "secret.txt").write_text("needle\n")
        (tmp_path / "kept.txt").write_text("needle\n")
        text = call(url, "file_glob_search", {"path": "."}, tmp_path)["plain_text_response"]
        assert sorted(text.partition("\n---\n")[0].split()) == [".gitignore", "kept.txt"]
        grep = call(url, "grep_search", {"path": ".", "pattern": "needle"}, tmp_path)["plain_text_response"]
        assert grep.startswith("kept.txt:needle\n") and "Total matches: 1" in grep
    finally:
        st.server_tools = ()


@pytest.mark.slow
def test_timeout_kills_the_whole_command(served, tmp_path) -> None:
    """A command whose children hold the pipe (a background sleep) still ends at its timeout:
    the kill reaches its process group; past the 16 KiB cap the output is cut."""
    st, url = served
    st.server_tools = ("exec_shell_command",)
    try:
        t0 = time.monotonic()
        out = call(url, "exec_shell_command", {"command": "sleep 30 & sleep 30; echo never", "timeout": 1}, tmp_path)
        assert time.monotonic() - t0 < 8
        assert out["plain_text_response"] == "\n[exit code: 1] [exit due to timed out]"
        big = call(url, "exec_shell_command", {"command": "yes | head -c 100000", "max_output_size": 10 ** 6}, tmp_path)
        assert big["plain_text_response"] == "y\n" * 8192 + "\n[output truncated]\n[exit code: 0]"
    finally:
        st.server_tools = ()


@pytest.mark.slow
def test_stream_client_leaving_kills_the_command(served, tmp_path) -> None:
    st, url = served
    st.server_tools = ("exec_shell_command",)
    try:
        body = {"tool": "exec_shell_command", "stream": True,
                "params": {"command": "echo $$ > pid; while true; do echo tick; sleep 0.1; done", "timeout": 60}}
        with httpx.stream("POST", url + "/tools", json=body, headers={"x-tool-cwd": str(tmp_path)}, timeout=30) as r:
            lines = r.iter_lines()
            assert next(ln for ln in lines if ln.startswith("data: ")) == 'data: {"chunk": "tick\\n"}'
        pid = int((tmp_path / "pid").read_text())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the command (pid {pid}) still runs after its client left")
    finally:
        st.server_tools = ()


@pytest.mark.slow
def test_runtime_header_and_params_cwd_refused(served, tmp_path) -> None:
    """x-tool-runtime naming a container: a 500 (llamapy runs tools on the host only); a cwd in
    the params is the model's, ignored (only the x-tool-cwd header sets it)."""
    st, url = served
    st.server_tools = ("all",)
    try:
        r = httpx.post(url + "/tools", json={"tool": "get_info", "params": {}}, headers={"x-tool-runtime": "docker-container:abc"})
        assert r.status_code == 500 and r.json()["message"].startswith("tool runtime not supported by llamapy")
        info = httpx.post(url + "/tools", json={"tool": "get_info", "params": {"cwd": str(tmp_path)}}).json()
        assert info["cwd"] == os.getcwd()
    finally:
        st.server_tools = ()
