"""Llama.create_chat_completion goes the server's chat way (chat/, server/chat_prep.py): on
SmolLM2's weights with llama.cpp's family templates, the prompt is /apply-template's, a
template that opens <think> gives reasoning_content (streamed as delta.reasoning_content),
tool calls come in the template's own syntax and parse back, and parallel_tool_calls and
reasoning_budget_tokens pass through."""
from __future__ import annotations

import json

import pytest
from server_harness import asgi_call, serving_state

from llamacpp_vocabs import templates_dir

pytestmark = pytest.mark.slow
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                                                           "required": ["city"]}}}


@pytest.fixture(scope="module")
def llm(smollm2_path):
    from llamapy import Llama

    return Llama(str(smollm2_path), n_ctx=2048, verbose=False)


def _use(llm, name: str) -> None:
    llm.model.tokenizer._chat = None
    llm.model.tokenizer.use_chat_template((templates_dir() / f"{name}.jinja").read_text())


def test_reasoning_template(llm) -> None:
    _use(llm, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
    llm.reset()
    out = llm.create_chat_completion(ASK, max_tokens=10, temperature=0.0)
    m = out["choices"][0]["message"]
    assert m["reasoning_content"] and not m["content"], m  # the prompt opened <think>
    with serving_state(llm.model, n_ctx=1024, np_=1) as st:
        prompt = asgi_call(st, "POST", "/apply-template", json={"messages": ASK}).json()["prompt"]
    assert out["usage"]["prompt_tokens"] == len(llm.model.tokenize(prompt, add_special=True, parse_special=True))
    llm.reset()
    chunks = list(llm.create_chat_completion(ASK, max_tokens=10, temperature=0.0, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == m["reasoning_content"]
    assert not "".join(d.get("content") or "" for d in deltas)
    raw = llm.create_chat_completion(ASK, max_tokens=10, temperature=0.0, reasoning_format="none")["choices"][0]["message"]
    assert "reasoning_content" not in raw and raw["content"]


@pytest.mark.parametrize("name,marker", [("Qwen-Qwen2.5-7B-Instruct", "<tool_call>"),
                                         ("mistralai-Mistral-Nemo-Instruct-2407", "[TOOL_CALLS]")])
def test_call_in_family_syntax(llm, name: str, marker: str) -> None:
    _use(llm, name)
    llm.reset()
    out = llm.create_chat_completion(ASK, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                                     max_tokens=120, temperature=0.0)
    c = out["choices"][0]
    assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None, c
    (call,) = c["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and isinstance(json.loads(call["function"]["arguments"])["city"], str)
    chunks = list(llm.create_chat_completion(ASK, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                                             max_tokens=120, temperature=0.0, stream=True))
    calls = [tc["function"] for ch in chunks for tc in ch["choices"][0]["delta"].get("tool_calls", [])]
    assert calls == [call["function"]] and chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_budget_passes_through(llm) -> None:
    _use(llm, "Qwen-QwQ-32B")
    llm.reset()
    raw = llm.create_chat_completion(ASK, max_tokens=12, temperature=0.0, reasoning_format="none",
                                     reasoning_budget_tokens=4, reasoning_budget_message=" Ok.")
    text = raw["choices"][0]["message"]["content"]
    assert " Ok.</think>" in text, text  # 3 tokens (QwQ's "<think>\n" counts its "\n"), the message, the end tag
    with pytest.raises(ValueError, match="tool_choice"):
        llm.create_chat_completion(ASK, tools=[WEATHER], tool_choice="bogus")
