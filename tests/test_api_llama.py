"""llamapy.Llama, llama-cpp-python's high-level class: greedy text equal to `llamapy run`'s,
its dict shapes, streaming, chat with the model's template, response_format, tools,
save_state / load_state, and llama-cpp-python's other parameters accepted and reported."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

PROMPT = "The capital of France is"
N = 16


@pytest.fixture(scope="module")
def llm(smollm2_path):
    from llamapy import Llama

    return Llama(str(smollm2_path), n_ctx=1024, verbose=False)


def test_greedy_completion_equals_llamapy_run(llm, smollm2_path):
    out = llm.create_completion(PROMPT, max_tokens=N, temperature=0.0)
    cmd = [sys.executable, "-m", "llamapy", "run", "-m", str(smollm2_path), "-p", PROMPT, "-n", str(N), "--temp", "0", "-c", "1024"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == PROMPT + out["choices"][0]["text"] + "\n"
    assert out["usage"]["completion_tokens"] == N and out["choices"][0]["finish_reason"] == "length"


def test_completion_dict_shape(llm):
    out = llm(PROMPT, max_tokens=4, temperature=0.0, logprobs=2, echo=True)
    assert set(out) == {"id", "object", "created", "model", "choices", "usage"}
    assert out["id"].startswith("cmpl-") and out["object"] == "text_completion"
    assert isinstance(out["created"], int) and out["model"] == llm.model_path
    (c,) = out["choices"]
    assert set(c) == {"text", "index", "logprobs", "finish_reason"} and c["index"] == 0
    assert c["text"].startswith(PROMPT)
    lp = c["logprobs"]
    assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert len(lp["tokens"]) == 4 and len(lp["top_logprobs"][0]) == 2 and lp["text_offset"][0] == len(PROMPT)
    assert all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"])
    u = out["usage"]
    assert u == {"prompt_tokens": len(llm.tokenize(PROMPT.encode())), "completion_tokens": 4, "total_tokens": u["prompt_tokens"] + 4}


def test_stream_concatenates_to_the_text(llm):
    whole = llm(PROMPT, max_tokens=N, temperature=0.0)
    chunks = list(llm(PROMPT, max_tokens=N, temperature=0.0, stream=True))
    assert len(chunks) > 2 and all(ch["object"] == "text_completion" for ch in chunks)
    assert len({ch["id"] for ch in chunks}) == 1
    assert [ch["choices"][0]["finish_reason"] for ch in chunks][-1] == "length"
    assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks[:-1])
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == whole["choices"][0]["text"]
    it = llm(PROMPT, max_tokens=N, temperature=0.0, stream=True)
    next(it), next(it)
    it.close()  # a consumer that stops early cancels the request (as a client that disconnects)
    assert llm(PROMPT, max_tokens=N, temperature=0.0)["choices"][0]["text"] == whole["choices"][0]["text"]


def test_chat_uses_the_template(llm):
    msgs = [{"role": "user", "content": "Say hello."}]
    # each call from an empty cache: a cached prompt re-decodes its last token as one row, whose
    # rounding differs from the prompt's many-row products (docs/deterministic.md), so a near tie
    # could turn the other way and the two replies would not be comparable
    llm.reset()
    out = llm.create_chat_completion(msgs, max_tokens=8, temperature=0.0)
    assert out["id"].startswith("chatcmpl-") and out["object"] == "chat.completion"
    (c,) = out["choices"]
    assert set(c) == {"index", "message", "logprobs", "finish_reason"}
    assert c["message"]["role"] == "assistant" and isinstance(c["message"]["content"], str) and c["message"]["content"]
    text = llm.model.tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
    assert "<|im_start|>assistant" in text  # SmolLM2's ChatML
    assert out["usage"]["prompt_tokens"] == len(llm.model.tokenize(text, add_special=True, parse_special=True))
    llm.reset()
    chunks = list(llm.create_chat_completion(msgs, max_tokens=8, temperature=0.0, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"} and chunks[-1]["choices"][0]["delta"] == {}
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
    assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks) == c["message"]["content"]


def test_response_format_schema_gives_valid_json(llm):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    out = llm.create_chat_completion([{"role": "user", "content": "Describe a person as JSON."}], max_tokens=80,
                                     temperature=0.0, response_format={"type": "json_object", "schema": schema})
    obj = json.loads(out["choices"][0]["message"]["content"])
    assert isinstance(obj["name"], str) and isinstance(obj["age"], int)


def test_tool_choice_required_gives_a_call(llm):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "current weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    out = llm.create_chat_completion([{"role": "user", "content": "What is the weather in Paris?"}], tools=tools,
                                     tool_choice="required", max_tokens=60, temperature=0.0)
    (c,) = out["choices"]
    assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None
    (call,) = c["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)


def test_save_load_state_gives_the_same_next_token(llm):
    llm.reset()
    first = llm(PROMPT, max_tokens=6, temperature=0.0)["choices"][0]["text"]
    state = llm.save_state()
    assert state.input_ids == llm.input_ids and state.n_tokens >= len(llm.tokenize(PROMPT.encode()))
    llm("Completely different words about cooking pasta", max_tokens=6, temperature=0.0)
    assert llm.input_ids != state.input_ids
    llm.load_state(state)
    assert llm.input_ids == state.input_ids
    # the cached prefix is taken from the restored cells, not decoded again: only the last
    # prompt token is decoded, so wrong K/V would change the continuation
    steps = []
    real = llm._eng.ctx.decode
    llm._eng.ctx.decode = lambda b: (steps.append(b.n_tokens), real(b))[1]
    try:
        again = llm(PROMPT, max_tokens=6, temperature=0.0)["choices"][0]["text"]
    finally:
        llm._eng.ctx.decode = real
    assert steps[0] == 1
    assert again == first
    llm.reset()
    assert llm.input_ids == [] and llm(PROMPT, max_tokens=6, temperature=0.0)["choices"][0]["text"] == first


def test_tokenize_roundtrip_and_counts(llm):
    ids = llm.tokenize(b"Hello world")  # SmolLM2's vocab adds no BOS (tokenizer.ggml.add_bos_token false)
    assert ids == llm.model.tokenize("Hello world") and llm.detokenize(ids) == b"Hello world"
    assert llm.token_bos() == 1 and llm.tokenize(b"<|im_start|>", special=True) == [1]
    assert llm.tokenize(b"<|im_start|>", special=False) != [1]
    assert llm.n_ctx() == 1024 and llm.n_vocab() == 49152 and llm.n_embd() == 576 and llm.token_eos() >= 0


def test_unknown_kwargs_accepted_and_reported(smollm2_path, caplog):
    from llamapy import Llama

    with caplog.at_level(logging.WARNING):
        ll = Llama(str(smollm2_path), n_ctx=256, use_mlock=True, rope_freq_base=0.0, not_a_llama_param=3)
    assert ll.ignored == ["not_a_llama_param", "rope_freq_base", "use_mlock"]
    msgs = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(msgs) == 1 and "not_a_llama_param" in msgs[0] and "use_mlock" in msgs[0]


def test_import_llamapy_stays_light():
    code = "import sys, llamapy; assert 'llamapy.server.scheduler' not in sys.modules and 'llamapy.api' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy(), timeout=60)


def test_docs_example_runs(smollm2_path):
    """docs/python-api.md's "The high-level API" example, run as written."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "python-api.md").read_text()
    sec = doc[doc.index("## The high-level API"):]
    code = sec[sec.index("```python\n") + 10:]
    code = code[:code.index("```")]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Paris" in r.stdout and isinstance(json.loads(r.stdout[r.stdout.rindex("{"):])["colour"], str)
