"""Reference answers of llama.cpp's llama-server --tools for tests/test_server_tools.py: a small
tree (TREE) written to a temporary directory, llama-server started on SmolLM2 with --tools all
(then --tools read_file,get_info, then without --tools), each request below sent with
x-tool-cwd = that directory; every answer (status, JSON body or the SSE events) is written with
its request to tests/data/server_tools_ref.json, the directory replaced by {ROOT}.

    PYTHONPATH=src python scripts/ref_server_tools.py [--bin DIR] [--model GGUF]

compare (how the test checks llamapy's answer): exact; sorted (a listing: its lines and entries
in any order, as readdir's order is the filesystem's); tail (a listing cut at its limit: the
text after `---` and the number of entries); error_prefix (the error's text up to
its first ':', e.g. std::regex's message is not Python's); keys (the same keys, and cwd)."""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin"
MODEL = Path.home() / ".cache/llamapy/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests/data/server_tools_ref.json"

TREE = {
    "src/a.txt": "alpha\nBeta\ngamma\n",
    "src/sub/b.py": "x = 1\nprint(x)\n",
    "src/sub/deep/c.txt": "deep alpha\n",
    "notes.md": "# notes\nalpha (1)\n",
    "node_modules/pkg/index.js": "alpha\n",
    "build/out.txt": "alpha\n",
    "big.txt": "".join(f"line {i:05d} {'x' * 40}\n" for i in range(400)),
    "many.txt": "m\n" * 150,
    "dup.txt": "dup\ndup\n",
}


def R(tool: str, params: dict, compare: str = "exact", headers: dict | None = None, stream: bool = False) -> dict:
    body: dict = {"tool": tool, "params": params}
    if stream:
        body["stream"] = True
    return {"body": body, "compare": compare, "headers": headers or {}}


REQUESTS_ALL = [
    R("read_file", {"path": "src/a.txt"}),
    R("read_file", {"path": "src/a.txt", "start_line": 2, "end_line": 3, "append_loc": True}),
    R("read_file", {"path": "{ROOT}/src/sub/b.py", "start_line": 2}),
    R("read_file", {"path": "nope.txt"}),
    R("read_file", {"path": "src"}),
    R("read_file", {"path": "big.txt"}),
    R("read_file", {"path": "big.txt", "start_line": 3, "end_line": 1000}),
    R("read_file", {"path": "src/a.txt"}, headers={"x-resp-type": "base64"}),
    R("read_file", {"start_line": 1}),
    R("read_file", {"path": 5}),
    R("read_file", {"path": "a.txt", "cwd": "{ROOT}/src"}),
    R("file_glob_search", {"path": "."}, "sorted"),
    R("file_glob_search", {"path": ".", "include": "*.py"}, "sorted"),
    R("file_glob_search", {"path": "{ROOT}", "include": "src/**/*.txt", "exclude": "*c*"}, "sorted"),
    R("file_glob_search", {"path": ".", "include": "[a-c].*"}, "sorted"),
    R("file_glob_search", {"path": ".", "include": "sub/*"}, "sorted"),
    R("file_glob_search", {"path": ".", "include": "**/s?b/**", "exclude": "**/deep/*"}, "sorted"),
    R("file_glob_search", {"path": ".", "include": "[!a-c]*.t?t"}, "sorted"),
    R("file_glob_search", {"path": ".", "type": "dir"}, "sorted"),
    R("file_glob_search", {"path": ".", "type": "all", "max_depth": 1}, "sorted"),
    R("file_glob_search", {"path": "src", "type": "all", "max_depth": 2}, "sorted"),
    R("file_glob_search", {"path": ".", "include": "*.txt", "limit": 2}, "tail"),
    R("file_glob_search", {"path": ".", "limit": 0}),
    R("file_glob_search", {"path": ".", "type": "bogus"}),
    R("file_glob_search", {"path": "missing"}),
    R("grep_search", {"path": ".", "pattern": "beta", "ignore_case": True, "context_lines": 1}),
    R("grep_search", {"path": "src", "pattern": "alpha", "return_line_numbers": True}, "sorted"),
    R("grep_search", {"path": ".", "pattern": "alpha", "include": "*.md"}),
    R("grep_search", {"path": ".", "pattern": "(1)", "literal": True}),
    R("grep_search", {"path": ".", "pattern": "alpha", "exclude": "src/**"}, "sorted"),
    R("grep_search", {"path": "src/a.txt", "pattern": "^g"}),
    R("grep_search", {"path": "src/a.txt", "pattern": "beta"}),
    R("grep_search", {"path": "many.txt", "pattern": "m", "context_lines": -3}),
    R("grep_search", {"path": ".", "pattern": "("}, "error_prefix"),
    R("grep_search", {"path": "missing", "pattern": "x"}),
    R("grep_search", {"path": "."}),
    R("write_file", {"path": "out/new.txt", "content": "one\ntwo\nthree\n"}),
    R("read_file", {"path": "out/new.txt"}),
    R("edit_file", {"path": "out/new.txt", "edits": [{"old_text": "two", "new_text": "2"},
                                                     {"old_text": "three\n", "new_text": "three\nfour\n"}]}),
    R("read_file", {"path": "out/new.txt"}),
    R("edit_file", {"path": "dup.txt", "edits": [{"old_text": "dup", "new_text": "x"}]}),
    R("edit_file", {"path": "out/new.txt", "edits": [{"old_text": "absent", "new_text": "x"}]}),
    R("edit_file", {"path": "out/new.txt", "edits": [{"old_text": "one\n2", "new_text": "a"},
                                                     {"old_text": "2\nthree", "new_text": "b"}]}),
    R("edit_file", {"path": "out/new.txt", "edits": []}),
    R("edit_file", {"path": "out/new.txt", "edits": [{"old_text": "", "new_text": "x"}]}),
    R("edit_file", {"path": "out/new.txt", "edits": [{"old_text": "one", "new_text": "one"}]}),
    R("edit_file", {"path": "missing.txt", "edits": [{"old_text": "a", "new_text": "b"}]}),
    R("write_file", {"path": "fuzzy.txt", "content": "keep  \nsay \u201chi\u201d \u2014 now  \nend\t\n"}),
    R("edit_file", {"path": "fuzzy.txt", "edits": [{"old_text": "say \"hi\" - now", "new_text": "say \"bye\""}]}),
    R("read_file", {"path": "fuzzy.txt"}),
    R("exec_shell_command", {"command": "echo hello; echo err 1>&2; exit 3"}),
    R("exec_shell_command", {"command": "pwd; cat src/a.txt"}),
    R("exec_shell_command", {"command": "printf 0123456789abcdefghij", "max_output_size": 10}),
    R("exec_shell_command", {"command": "echo start; sleep 4", "timeout": 1}),
    R("exec_shell_command", {"command": "echo streamed; exit 2"}, stream=True),
    R("read_file", {"path": "src/a.txt"}, stream=True),
    R("exec_shell_command", {"timeout": 1}, stream=True),
    R("exec_shell_command", {"command": "echo hi"}, headers={"x-tool-runtime": "ssh:-oProxyCommand=x"}, stream=True),
    R("get_info", {}, "keys"),
    R("nope", {}),
    R("read_file", {"path": "src/a.txt"}, headers={"x-tool-runtime": "fake:x"}),
]
REQUESTS_SOME = [R("read_file", {"path": "src/a.txt"}), R("exec_shell_command", {"command": "echo hi"})]
REQUESTS_NONE = [R("read_file", {"path": "src/a.txt"})]
CASES = {"all": ("all", REQUESTS_ALL), "some": ("read_file,get_info", REQUESTS_SOME), "none": (None, REQUESTS_NONE)}


def write_tree(root: Path) -> None:
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def subst(v, root: str, back: bool = False):
    """{ROOT} -> root in a request (back: root -> {ROOT} in an answer), recursively."""
    if isinstance(v, str):
        return v.replace(root, "{ROOT}") if back else v.replace("{ROOT}", root)
    if isinstance(v, list):
        return [subst(x, root, back) for x in v]
    if isinstance(v, dict):
        return {k: subst(x, root, back) for k, x in v.items()}
    return v


def ask(client: httpx.Client, req: dict, root: str) -> dict:
    """One request: {status, body} or {status, events} (an SSE answer's data objects)."""
    # a fresh connection each: after a streamed answer httplib may close the kept-alive one
    headers = {"x-tool-cwd": root, "Connection": "close", **subst(req["headers"], root)}
    r = client.post("/tools", json=subst(req["body"], root), headers=headers)
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        events = [json.loads(ln[6:]) for ln in r.text.split("\n") if ln.startswith("data: ")]
        return subst({"status": r.status_code, "events": events}, root, back=True)
    return subst({"status": r.status_code, "body": r.json()}, root, back=True)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run_case(bin_dir: Path, model: Path, tools: str | None, reqs: list[dict]) -> dict:
    port = free_port()
    cmd = [str(bin_dir / "llama-server"), "-m", str(model), "--port", str(port), "-t", "2", "-c", "512"]
    cmd += ["--tools", tools] if tools else []
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with tempfile.TemporaryDirectory() as d, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
            for _ in range(300):
                try:
                    if c.get("/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            write_tree(Path(d))
            g = c.get("/tools")
            answers = [ask(c, r, d) for r in reqs]
            return {"tools": tools, "get": {"status": g.status_code, "body": g.json()},
                    "requests": [{**r, "answer": a} for r, a in zip(reqs, answers)],
                    "command": ["llama-server", "-m", model.name, *cmd[5:]]}
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, default=BIN)
    ap.add_argument("--model", type=Path, default=MODEL)
    a = ap.parse_args()
    version = subprocess.run([str(a.bin / "llama-server"), "--version"], capture_output=True, text=True)
    out = {"tree": TREE, "llama_cpp_version": (version.stdout + version.stderr).strip().splitlines()[-1],
           "cases": {name: run_case(a.bin, a.model, tools, reqs) for name, (tools, reqs) in CASES.items()}}
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
