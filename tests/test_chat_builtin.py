"""--no-jinja: llama.cpp's built-in chat templates (chat/builtin.py), named with
--chat-template NAME or detected from a template's text, render what llama-server renders with
--no-jinja (tests/data/chat_builtin.json, written by scripts/ref_chat_builtin.py: each name,
and family templates of llama.cpp's models/templates, x 5 conversations through
/apply-template)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from llamapy.chat.builtin import NAMES, BuiltinTemplateError, detect, legacy_prompt
from llamapy.cli.chat_flags import add_chat_template, template_source

REF = json.loads((Path(__file__).parent / "data/chat_builtin.json").read_text())
TEMPLATES = Path.home() / ".cache/llamacpp-ref/llama.cpp/models/templates"


def _source(entry) -> str:
    if "name" in entry:
        return entry["name"]
    path = TEMPLATES / f"{entry['file']}.jinja"
    if not path.is_file():
        pytest.skip(f"llama.cpp's template {path} is not here (scripts/ref_chat_builtin.py reads the same checkout)")
    return path.read_text()


@pytest.mark.parametrize("entry", REF, ids=[e.get("name") or e["file"] for e in REF])
def test_like_llama_server_no_jinja(entry) -> None:
    src = _source(entry)
    for case in entry["cases"]:
        body = case["body"]
        got = legacy_prompt(src, body["messages"], body.get("add_generation_prompt", True))
        assert case["status"] == 200 and got == case["prompt"], (body, got, case.get("prompt"))


def test_names_and_unknown() -> None:
    assert set(NAMES) == {e["name"] for e in REF if "name" in e}
    assert detect("{{ messages[0].content }}") is None
    with pytest.raises(BuiltinTemplateError, match="not supported, try using --jinja"):
        legacy_prompt("{{ messages[0].content }}", [{"role": "user", "content": "x"}])


def test_chat_template_flag() -> None:
    p = argparse.ArgumentParser()
    add_chat_template(p)
    assert template_source(p.parse_args(["--no-jinja", "--chat-template", "llama3"])) == "llama3"
    with pytest.raises(ValueError, match="use it with --no-jinja"):
        template_source(p.parse_args(["--chat-template", "llama3"]))
    assert "im_start" in template_source(p.parse_args(["--chat-template", "chatml"]))


def test_server_prompt_no_jinja() -> None:
    """prepare_chat (/apply-template, /v1/chat/completions) with --no-jinja takes this path;
    an unknown template is llama-server's error."""
    from types import SimpleNamespace

    from llamapy.chat.apply import ChatOptions
    from llamapy.chat_template import ChatTemplate
    from llamapy.server.api_error import APIError
    from llamapy.server.chat_prep import prepare_chat
    from llamapy.server.schemas import ChatCompletionRequest

    entry = next(e for e in REF if e.get("name") == "gemma")
    case = entry["cases"][1]

    def state(src: str) -> SimpleNamespace:
        return SimpleNamespace(chat=ChatOptions(use_jinja=False), model=SimpleNamespace(tokenizer=SimpleNamespace(chat=ChatTemplate(src))))
    assert prepare_chat(state("gemma"), ChatCompletionRequest.model_validate(case["body"])).prompt == case["prompt"]
    with pytest.raises(APIError, match="try using --jinja"):
        prepare_chat(state("{{ messages[0].content }}"), ChatCompletionRequest.model_validate(case["body"]))
