#!/usr/bin/env python3
"""Reference prompts of llama-server with --no-jinja (llama.cpp's built-in templates,
src/llama-chat.cpp), for tests/test_chat_builtin.py.

For each built-in name (`--chat-template NAME`) and each family template file of llama.cpp's
models/templates (`--chat-template-file`, the built-in detected from its text) this starts
llama-server --no-jinja with SmolLM2's GGUF, posts CASES to /apply-template and writes
tests/data/chat_builtin.json: [{"name" | "file", "cases": [{"body", "status", "prompt" | "error"}]}]

Usage: scripts/ref_chat_builtin.py [--bin DIR] [--model GGUF]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ref_chat_templates import DEFAULT_MODEL, LLAMACPP, ROOT, ServerExited, llama_server, post  # noqa: E402

NAMES = ["chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1", "mistral-v3",
         "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "phi3", "phi4", "falcon3", "zephyr", "monarch",
         "gemma", "orion", "openchat", "vicuna", "vicuna-orca", "deepseek", "deepseek2", "deepseek3", "command-r",
         "llama3", "granite", "gpt-oss"]
FILES = ["meta-llama-Llama-3.1-8B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506",
         "microsoft-Phi-3.5-mini-instruct", "google-gemma-2-2b-it", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
         "Qwen-Qwen2.5-7B-Instruct", "CohereForAI-c4ai-command-r-plus-tool_use", "ibm-granite-granite-3.3-2B-Instruct",
         "openai-gpt-oss-120b"]
SYS = {"role": "system", "content": "  You are terse.  "}
CASES: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Hello!"}]},
    {"messages": [SYS, {"role": "user", "content": " Hi \n"}, {"role": "assistant", "content": " Hello. "},
                  {"role": "user", "content": "Joke?"}]},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Bye"}],
     "add_generation_prompt": False},
    {"messages": [SYS, {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}]},
    {"messages": [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "One, two"}]},
]


def run(server: Path, model: Path, flags: list[str]) -> list[dict[str, Any]]:
    try:
        with llama_server(server, model, ["--no-jinja", *flags]) as port:
            out = []
            for body in CASES:
                status, res = post(port, "/apply-template", body)
                out.append({"body": body, "status": status, **({"prompt": res["prompt"]} if status == 200 else
                                                                {"error": (res.get("error") or {}).get("message", str(res))})})
            return out
    except ServerExited as e:
        return [{"startup_error": str(e)[-300:]}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=LLAMACPP / "build/bin")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    a = ap.parse_args()
    srv = a.bin / "llama-server"
    res = [{"name": n, "cases": run(srv, a.model, ["--chat-template", n])} for n in NAMES]
    res += [{"file": f, "cases": run(srv, a.model, ["--chat-template-file", str(LLAMACPP / "models/templates" / f"{f}.jinja")])}
            for f in FILES]
    (ROOT / "tests/data/chat_builtin.json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
