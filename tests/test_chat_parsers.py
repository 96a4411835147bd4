"""Model outputs in each family's syntax parse as llama-server's chat parser parses them.

Expectations are the cases of llama.cpp's tests/test-chat.cpp (the line of each is cited),
with its messages: message_assist = content "Hello, world!\\nWhat's up?", message_assist_call
= a call special_function({"arg1": 1}), message_assist_thoughts = reasoning "I'm\\nthinking"
plus that content.  Each output is parsed after the template renders a prompt for a user
message (whether that prompt opened <think> decides where the output starts), and again
streamed: every prefix parsed as partial only grows, and the deltas add up to the message."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamacpp_vocabs import templates_dir
from llamapy.chat.apply import apply_template
from llamapy.chat.message import parse_message, thinking_opened
from llamapy.chat.tool_syntax import chat_format
from llamapy.chat_template import ChatTemplate

SPECIAL = {"type": "function", "function": {"name": "special_function", "description": "I'm special",
                                            "parameters": {"type": "object", "properties": {"arg1": {"type": "integer"}},
                                                           "required": ["arg1"]}}}
HELLO = "Hello, world!\nWhat's up?"
CALL = [("special_function", '{"arg1": 1}', "")]

# (template, output, tools offered, reasoning_format, (content, reasoning, calls)), test-chat.cpp line
CASES = [
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call>', True, "auto", ("", "", CALL)),  # 3332
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", HELLO + '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call>', True, "auto", (HELLO, "", CALL)),  # 3340
    ("Qwen-Qwen2.5-7B-Instruct", HELLO, True, "auto", (HELLO, "", [])),  # 6106
    ("Qwen-Qwen2.5-7B-Instruct", '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>', True, "auto", ("", "", CALL)),  # 6107
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>', True, "auto", ("", "", CALL)),  # 6107
    ("Qwen-QwQ-32B", "Let me think about this...\n</think>\nThe answer is 42.", False, "auto", ("The answer is 42.", "Let me think about this...", [])),  # 3299
    ("Qwen-QwQ-32B", "</think>Hello, world!", False, "auto", ("Hello, world!", "", [])),  # 3305
    ("mistralai-Mistral-Nemo-Instruct-2407", HELLO, True, "auto", (HELLO, "", [])),  # 5916
    ("mistralai-Mistral-Nemo-Instruct-2407", '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]', True, "auto",
     ("", "", [("special_function", '{"arg1": 1}', "123456789")])),  # 5917
    ("Mistral-Small-3.2-24B-Instruct-2506", '[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}', True, "auto",
     ("", "", [("special_function", '{"arg1": 1}', "123456789")])),  # 6254
    ("Mistral-Small-3.2-24B-Instruct-2506", '[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}'
     '[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{"arg1": 1, "arg2": 2}', True, "auto",
     ("", "", [("special_function", '{"arg1": 1}', "000000001"), ("special_function_with_opt", '{"arg1": 1, "arg2": 2}', "000000002")])),  # 6260
    ("unsloth-mistral-Devstral-Small-2507", HELLO + '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', True, "auto", (HELLO, "", CALL)),  # 6288
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "</think>" + HELLO, False, "deepseek", (HELLO, "", [])),  # 5991
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "I'm\nthinking</think>" + HELLO, False, "deepseek", (HELLO, "I'm\nthinking", [])),  # 5995
    ("llama-cpp-deepseek-r1", "</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
     "```json\n{\"arg1\": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", True, "deepseek", ("", "", CALL)),  # 6027
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "I'm\nthinking</think>" + HELLO, False, "deepseek", (HELLO, "I'm\nthinking", [])),  # 6067
    ("openai-gpt-oss-120b", "<|channel|>final<|message|>" + HELLO, False, "auto", (HELLO, "", [])),  # 6428
    ("openai-gpt-oss-120b", "<|channel|>commentary<|message|>" + HELLO, False, "auto", (HELLO, "", [])),  # 6431
    ("openai-gpt-oss-120b", "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>" + HELLO,
     False, "auto", (HELLO, "I'm\nthinking", [])),  # 6434
    ("openai-gpt-oss-120b", "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>" + HELLO,
     False, "none", ("<|channel|>analysis<|message|>I'm\nthinking<|end|>" + HELLO, "", [])),  # 6442
    ("openai-gpt-oss-120b", ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}', True, "auto", ("", "", CALL)),  # 6457
    ("openai-gpt-oss-120b", '<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}', True, "auto", ("", "", CALL)),  # 6464
    ("openai-gpt-oss-120b", ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}', True, "auto", ("", "", CALL)),  # 6471
    ("openai-gpt-oss-120b", '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}', True, "auto", ("", "", CALL)),  # 6478
    ("openai-gpt-oss-120b", "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function"
     '<|channel|>analysis<|message|>{"arg1": 1}', True, "auto", ("", "I'm\nthinking", CALL)),  # 6485
    ("openai-gpt-oss-120b", "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant to=container.exec"
     "<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'", False, "auto", ("", "I will execute python to say hello", [])),  # 6544
    # not in test-chat.cpp: a call that does not parse stays text; a Llama 3.x JSON call
    ("Qwen-Qwen2.5-7B-Instruct", '<tool_call>\n{"name": "special_function", "arguments": {"arg1": </tool_call>', True, "auto",
     ('<tool_call>\n{"name": "special_function", "arguments": {"arg1": </tool_call>', "", [])),
    ("meta-llama-Llama-3.1-8B-Instruct", HELLO, True, "auto", (HELLO, "", [])),  # 6300
    ("meta-llama-Llama-3.1-8B-Instruct", '{"name": "special_function", "parameters": {"arg1": 1}}', True, "auto", ("", "", CALL)),
    ("meta-llama-Llama-3.1-8B-Instruct", '<|python_tag|>{"name": "special_function", "parameters": {"arg1": 1}}', True, "auto", ("", "", CALL)),
]


def _template(name: str) -> ChatTemplate:
    src = templates_dir() / f"{name}.jinja"  # llama.cpp's, from the llama-cpp-python sdist (tests/llamacpp_vocabs.py)
    return ChatTemplate(src.read_text(), bos_token="<s>", eos_token="</s>")


def _as_tuple(msg) -> tuple:
    return (msg.content, msg.reasoning_content, [(c["name"], json.dumps(json.loads(c["arguments"])), c["id"]) for c in msg.tool_calls])


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0][:24]}-{i}" for i, c in enumerate(CASES)])
def test_parse_like_llama_server(case) -> None:
    name, out, tools_on, rf, want = case
    t = _template(name)
    prompt = apply_template(t, [{"role": "user", "content": "Hey"}], [SPECIAL] if tools_on else None)
    fmt = chat_format(t)
    msg = parse_message(out, fmt, rf, thinking_opened(prompt), calls=tools_on)
    assert _as_tuple(msg) == (want[0], want[1], [(n, json.dumps(json.loads(a)), i) for n, a, i in want[2]])
    # streamed: every prefix, parsed as partial, extends the previous one, and the end is the message
    sent = {"content": "", "reasoning_content": ""}
    for k in range(1, len(out) + 2):
        part = parse_message(out[:k], fmt, rf, thinking_opened(prompt), calls=tools_on, partial=k <= len(out))
        for f in sent:
            now = getattr(part, f)
            assert now.startswith(sent[f]), (f, k, sent[f], now)
            sent[f] = now
    assert (sent["content"], sent["reasoning_content"]) == want[:2]


@pytest.mark.parametrize("name,kind", [
    ("Qwen-Qwen3-0.6B", "hermes"), ("HuggingFaceTB-SmolLM3-3B", "generic"), ("meta-llama-Llama-3.3-70B-Instruct", "llama3"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral"), ("Mistral-Small-3.2-24B-Instruct-2506", "magistral"),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1"), ("openai-gpt-oss-120b", "gpt-oss"),
    ("google-gemma-2-2b-it", "generic"), ("microsoft-Phi-3.5-mini-instruct", "generic")])
def test_format_from_template(name: str, kind: str) -> None:
    assert chat_format(_template(name)).kind == kind
