"""parallel_tool_calls as llama-server: absent, it is the template's
supports_parallel_tool_calls (server-common.cpp: json_value(body, "parallel_tool_calls",
caps["supports_parallel_tool_calls"])); it decides whether the grammar allows one call or
several, and without it two calls do not match the format (they stay text)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from llamacpp_vocabs import templates_dir
from llamapy.chat.apply import ChatOptions
from llamapy.chat.message import parse_message
from llamapy.chat.tool_syntax import chat_format
from llamapy.chat_template import ChatTemplate
from llamapy.server.chat_prep import prepare_chat
from llamapy.server.schemas import ChatCompletionRequest

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}
TWO = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n<tool_call>\n{"name": "f", "arguments": {"a": 2}}\n</tool_call>'


def _state(name: str) -> SimpleNamespace:
    """What prepare_chat reads of the server's state: the chat options and the template."""
    t = ChatTemplate((templates_dir() / f"{name}.jinja").read_text())
    return SimpleNamespace(chat=ChatOptions(), model=SimpleNamespace(tokenizer=SimpleNamespace(chat=t)))


@pytest.mark.parametrize("name,given,want", [
    ("Qwen-Qwen2.5-7B-Instruct", None, True), ("Qwen-Qwen2.5-7B-Instruct", False, False),
    ("meta-llama-Llama-3.1-8B-Instruct", None, False), ("meta-llama-Llama-3.1-8B-Instruct", True, True)])
def test_default_is_the_templates_caps(name: str, given, want: bool) -> None:
    st = _state(name)
    assert st.model.tokenizer.chat.caps.supports_parallel_tool_calls == (name.startswith("Qwen"))
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL], "tool_choice": "required"}
    if given is not None:
        body["parallel_tool_calls"] = given
    prep = prepare_chat(st, ChatCompletionRequest.model_validate(body))
    assert prep.parallel is want and prep.plan.parallel is want
    if chat_format(st.model.tokenizer.chat).kind == "hermes":  # (Llama 3.x's syntax has one call either way)
        assert ('("\\n" call)*' in prep.plan.lark) == want


@pytest.mark.parametrize("parallel", [True, False])
def test_two_calls_need_parallel(parallel: bool) -> None:
    fmt = chat_format(ChatTemplate((templates_dir() / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()))
    msg = parse_message(TWO, fmt, "auto", calls=True, parallel=parallel)
    if parallel:
        assert [json.loads(c["arguments"])["a"] for c in msg.tool_calls] == [1, 2] and msg.content == ""
    else:
        assert msg.tool_calls == [] and msg.content == TWO
