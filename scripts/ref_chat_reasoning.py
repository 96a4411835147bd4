#!/usr/bin/env python3
"""Reference answers of llama-server for the reasoning budget and tools on thinking templates,
for tests/test_chat_budget.py.

Starts llama-server with SmolLM2's GGUF, `--chat-template-file` (llama.cpp's
models/templates/NAME.jinja) and each configuration's flags, posts its requests (greedy) to
/apply-template and /v1/chat/completions, and writes tests/data/chat_reasoning.json:
    [{"template", "flags", "requests": [{"path", "body", "status", "response"}]}]

Usage: scripts/ref_chat_reasoning.py [--bin DIR] [--model GGUF]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ref_chat_templates import DEFAULT_MODEL, LLAMACPP, ROOT, llama_server, post  # noqa: E402

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                                                           "required": ["city"]}}}
G = {"temperature": 0, "max_tokens": 24}
R1, QWQ, QWEN3 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "Qwen-QwQ-32B", "Qwen-Qwen3-0.6B"
CHAT = "/v1/chat/completions"
CONFIGS: list[tuple[str, list[str], list[tuple[str, dict[str, Any]]]]] = [
    (QWQ, [], [("/apply-template", {"messages": ASK}),
               (CHAT, {"messages": ASK, **G}),
               (CHAT, {"messages": ASK, **G, "reasoning_budget_tokens": 0}),
               (CHAT, {"messages": ASK, **G, "reasoning_budget_tokens": 5}),
               (CHAT, {"messages": ASK, **G, "thinking_budget_tokens": 3, "reasoning_budget_message": " Enough."}),
               (CHAT, {"messages": ASK, **G, "max_tokens": 40, "tools": [WEATHER], "tool_choice": "auto", "reasoning_budget_tokens": 4})]),
    (QWQ, ["--reasoning-budget", "0"], [("/apply-template", {"messages": ASK}), (CHAT, {"messages": ASK, **G})]),
    (QWQ, ["--reasoning-budget", "2", "--reasoning-budget-message", " Done."], [(CHAT, {"messages": ASK, **G})]),
    (R1, ["--reasoning-budget", "0"], [("/apply-template", {"messages": ASK}), (CHAT, {"messages": ASK, **G})]),
    (QWEN3, ["--reasoning-budget", "0"], [("/apply-template", {"messages": ASK})]),
]


def run(server: Path, model: Path, name: str, flags: list[str], reqs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    tmpl = LLAMACPP / "models/templates" / f"{name}.jinja"
    with llama_server(server, model, ["--chat-template-file", str(tmpl), *flags], n_ctx=2048, threads=2) as port:
        out = []
        for path, body in reqs:
            status, res = post(port, path, body)
            if path != "/apply-template" and status == 200:
                res = {"message": res["choices"][0]["message"], "finish_reason": res["choices"][0]["finish_reason"]}
            out.append({"path": path, "body": body, "status": status, "response": res})
        return {"template": name, "flags": flags, "requests": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=LLAMACPP / "build/bin")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    a = ap.parse_args()
    res = [run(a.bin / "llama-server", a.model, n, f, r) for n, f, r in CONFIGS]
    (ROOT / "tests/data/chat_reasoning.json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
