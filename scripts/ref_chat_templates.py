#!/usr/bin/env python3
"""Reference prompts from llama-server's POST /apply-template, for tests/test_chat_templates.py.

For each template in TEMPLATES (llama.cpp's models/templates/NAME.jinja) this starts
llama-server with SmolLM2's GGUF and `--chat-template-file`, posts every case of CASES
(messages, tools, chat_template_kwargs, add_generation_prompt) and writes
tests/data/chat_templates/NAME.json:

    {"template": NAME, "now": "YYYY-MM-DD" (the server's local date: strftime_now and
     date_string depend on it), "bos_token", "eos_token", "add_bos", "add_eos",
     "cases": [{"name", "body", "prompt" | "error"}]}

The template text itself is not copied: the test reads it from the same llama.cpp checkout
(and skips, naming the path, without it).

Usage: scripts/ref_chat_templates.py [--bin DIR] [--model GGUF] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
LLAMACPP = Path.home() / ".cache/llamacpp-ref/llama.cpp"
DEFAULT_MODEL = Path.home() / ".cache/llamapy/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests/data/chat_templates"

TEMPLATES = [
    "Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "Qwen-QwQ-32B",
    "meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "meta-llama-Llama-3.3-70B-Instruct",
    "mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506",
    "microsoft-Phi-3.5-mini-instruct", "google-gemma-2-2b-it",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "llama-cpp-deepseek-r1",
    "openai-gpt-oss-120b", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "HuggingFaceTB-SmolLM3-3B",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use", "fireworks-ai-llama-3-firefunction-v2",
]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current local time",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
SYS = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is the weather in Paris?"}


def call(cid: str, name: str, args: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


CALL1 = call("a1b2c3d4e", "get_weather", '{"city": "Paris", "unit": "c"}')
CALL2 = call("f5g6h7i8j", "get_time", '{"tz": "Europe/Paris"}')
CASES: list[tuple[str, dict[str, Any]]] = [
    ("user_only", {"messages": [{"role": "user", "content": "Hello!"}]}),
    ("system", {"messages": [SYS, {"role": "user", "content": "Hello!"}]}),
    ("multi_turn", {"messages": [SYS, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                                 {"role": "user", "content": "Tell me a joke.\nA short one."}]}),
    ("no_generation_prompt", {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                                           {"role": "user", "content": "Bye"}], "add_generation_prompt": False}),
    ("developer", {"messages": [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hello"}]}),
    ("tools", {"messages": [SYS, USER], "tools": [WEATHER, TIME]}),
    ("tools_no_system", {"messages": [USER], "tools": [WEATHER]}),
    ("tool_call", {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [CALL1]},
                                {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "18 C, sunny"}],
                   "tools": [WEATHER, TIME]}),
    ("two_tool_calls", {"messages": [SYS, {"role": "user", "content": "Weather and time in Paris?"},
                                     {"role": "assistant", "content": "", "tool_calls": [CALL1, CALL2]},
                                     {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "18 C"},
                                     {"role": "tool", "tool_call_id": "f5g6h7i8j", "name": "get_time", "content": "14:05"},
                                     {"role": "assistant", "content": "It is 18 C and 14:05."},
                                     {"role": "user", "content": "Thanks"}],
                        "tools": [WEATHER, TIME]}),
    ("tool_call_object_args", {"messages": [USER, {"role": "assistant", "content": "Let me check.",
                                                   "tool_calls": [{"id": "k9l8m7n6o", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                                            {"role": "tool", "tool_call_id": "k9l8m7n6o", "content": "{\"temp\": 18}"}],
                               "tools": [WEATHER]}),
    ("reasoning", {"messages": [{"role": "user", "content": "2+2?"},
                                {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
                                {"role": "user", "content": "And 3+3?"}]}),
    ("reasoning_tool_call", {"messages": [USER, {"role": "assistant", "content": "", "reasoning_content": "I need the weather tool.",
                                                 "tool_calls": [CALL1]},
                                          {"role": "tool", "tool_call_id": "a1b2c3d4e", "content": "18 C"}],
                             "tools": [WEATHER]}),
    ("no_thinking", {"messages": [{"role": "user", "content": "Hello!"}], "chat_template_kwargs": {"enable_thinking": False}}),
    ("thinking_on", {"messages": [{"role": "user", "content": "Hello!"}], "chat_template_kwargs": {"enable_thinking": True}}),
    ("prefill", {"messages": [{"role": "user", "content": "Count to three"}, {"role": "assistant", "content": "One, two"}]}),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def get(port: int, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


class ServerExited(RuntimeError):
    """llama-server exited before /health said ok; the message ends with its stderr's tail."""


@contextlib.contextmanager
def llama_server(server: Path, model: Path, flags: list[str], n_ctx: int = 512, threads: int = 1) -> Iterator[int]:
    """A llama-server on 127.0.0.1 and a free port with `flags`, up once /health says ok (at
    most 120 s); yields the port and terminates it after."""
    port = free_port()
    proc = subprocess.Popen([str(server), "-m", str(model), *flags, "--port", str(port), "--host", "127.0.0.1",
                             "-c", str(n_ctx), "-t", str(threads), "-np", "1", "--no-warmup"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            try:
                if get(port, "/health").get("status") == "ok":
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if proc.poll() is not None:
                raise ServerExited(f"llama-server {' '.join(flags)} exited: {proc.stderr.read()[-2000:]}")
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def run_template(server: Path, model: Path, name: str) -> dict[str, Any]:
    tmpl = LLAMACPP / "models/templates" / f"{name}.jinja"
    with llama_server(server, model, ["--chat-template-file", str(tmpl)]) as port:
        props = get(port, "/props")
        out: dict[str, Any] = {"template": name, "now": datetime.now().strftime("%Y-%m-%d"),
                               "bos_token": props.get("bos_token"), "eos_token": props.get("eos_token"),
                               "chat_template_caps": props.get("chat_template_caps"), "cases": []}
        for cname, body in CASES:
            status, res = post(port, "/apply-template", body)
            entry: dict[str, Any] = {"name": cname, "body": body}
            if status == 200:
                entry["prompt"] = res["prompt"]
            else:
                entry["error"] = (res.get("error") or {}).get("message", str(res))
            out["cases"].append(entry)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=LLAMACPP / "build/bin")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in a.only or TEMPLATES:
        res = run_template(a.bin / "llama-server", a.model, name)
        (OUT / f"{name}.json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
        errs = sum("error" in c for c in res["cases"])
        print(f"{name}: {len(res['cases'])} cases ({errs} errors)", file=sys.stderr)


if __name__ == "__main__":
    main()
