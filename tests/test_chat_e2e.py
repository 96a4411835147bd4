"""End to end on SmolLM2's weights with llama.cpp's family templates (what --chat-template-file
gives): tool_choice "required" yields a call in the family's own syntax (the grammar holds it),
parsed back into tool_calls, plain and streamed; a template that opens <think> yields
reasoning_content."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from server_harness import asgi_call, serving_state

from llamacpp_vocabs import templates_dir
from llamapy.chat.tool_syntax import chat_format
from llamapy.model.model import Model

pytestmark = pytest.mark.slow
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                                                           "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
FAMILIES = [("Qwen-Qwen2.5-7B-Instruct", "hermes"), ("meta-llama-Llama-3.1-8B-Instruct", "llama3"),
            ("mistralai-Mistral-Nemo-Instruct-2407", "mistral"), ("Mistral-Small-3.2-24B-Instruct-2506", "magistral"),
            ("llama-cpp-deepseek-r1", "deepseek-r1"), ("openai-gpt-oss-120b", "gpt-oss")]


@pytest.fixture(scope="module")
def model(smollm2_path):
    return Model.load(smollm2_path)


def _use(model, name: str) -> None:
    src = templates_dir() / f"{name}.jinja"  # llama.cpp's, from the llama-cpp-python sdist (tests/llamacpp_vocabs.py)
    model.tokenizer._chat = None
    model.tokenizer.use_chat_template(src.read_text())


@pytest.mark.parametrize("name,kind", FAMILIES)
def test_required_call_in_family_syntax(model, name: str, kind: str) -> None:
    _use(model, name)
    assert chat_format(model.tokenizer.chat).kind == kind
    msgs = ASK
    if kind == "deepseek-r1":  # its prompt opens <think>: thinking is free until </think> (which SmolLM2 never writes),
        msgs = ASK + [{"role": "assistant", "content": "Let me check."}]  # so the turn goes on after a closed one
    body = {"messages": msgs, "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False, "temperature": 0, "max_tokens": 200}
    with serving_state(model, n_ctx=4096, np_=1, n_batch=512) as st:
        r = asgi_call(st, "POST", "/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        assert c["finish_reason"] == "tool_calls", c
        call = c["message"]["tool_calls"][0]
        assert call["function"]["name"] == "get_weather" and isinstance(json.loads(call["function"]["arguments"])["city"], str)
        r = asgi_call(st, "POST", "/v1/chat/completions", json={**body, "stream": True})
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        calls = [tc for ch in chunks for tc in ch["choices"][0]["delta"].get("tool_calls", [])]
        assert [tc["function"] for tc in calls] == [call["function"]], r.text[-800:]
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        p = asgi_call(st, "GET", "/props").json()
        assert p["chat_template"] == model.tokenizer.chat.source and p["chat_template_caps"]["supports_tool_calls"]


def test_reasoning_template_gives_reasoning_content(model) -> None:
    """DeepSeek-R1 Distill's prompt ends in <think>: what the model writes is reasoning until
    </think> (SmolLM2 never closes it), none of it content; reasoning_format none keeps it in
    content; the stream carries it as delta.reasoning_content."""
    _use(model, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
    body = {"messages": ASK, "temperature": 0, "max_tokens": 12}
    with serving_state(model, n_ctx=2048, np_=1, n_batch=256) as st:
        prompt = asgi_call(st, "POST", "/apply-template", json=body).json()["prompt"]
        assert prompt.rstrip().endswith("<think>")
        m = asgi_call(st, "POST", "/v1/chat/completions", json=body).json()["choices"][0]["message"]
        assert m["reasoning_content"] and not m["content"], m
        raw = asgi_call(st, "POST", "/v1/chat/completions", json={**body, "reasoning_format": "none"}).json()
        assert raw["choices"][0]["message"]["content"].strip() == m["reasoning_content"]
        r = asgi_call(st, "POST", "/v1/chat/completions", json={**body, "stream": True})
        deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in r.text.splitlines() if line.startswith("data: {")]
        assert "".join(d.get("reasoning_content", "") for d in deltas) == m["reasoning_content"]
        assert not "".join(d.get("content") or "" for d in deltas)
