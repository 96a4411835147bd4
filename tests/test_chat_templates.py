"""Rendering equals llama-server's /apply-template for llama.cpp's family templates.

Expected prompts come from scripts/ref_chat_templates.py (llama-server with SmolLM2's GGUF
and --chat-template-file), stored in tests/data/chat_templates/NAME.json with the date the
server rendered on (Llama 3.x and Mistral Small print today's date; the test renders with that
date).  The template sources are read from the llama.cpp checkout the script used."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import jinja2
import pytest

from llamacpp_vocabs import templates_dir
from llamapy.chat.apply import apply_template
from llamapy.chat.inputs import ChatInputError
from llamapy.chat_template import ChatTemplate

DATA = Path(__file__).parent / "data/chat_templates"
REFS = sorted(DATA.glob("*.json"))


def _template(ref: dict) -> ChatTemplate:
    src = templates_dir() / f"{ref['template']}.jinja"  # llama.cpp's, from the llama-cpp-python sdist (tests/llamacpp_vocabs.py)
    return ChatTemplate(src.read_text(), bos_token=ref["bos_token"], eos_token=ref["eos_token"])


@pytest.mark.parametrize("path", REFS, ids=[p.stem for p in REFS])
def test_render_matches_llama_server(path: Path) -> None:
    ref = json.loads(path.read_text())
    t = _template(ref)
    now = datetime.strptime(ref["now"], "%Y-%m-%d").replace(hour=12)
    bad = []
    for case in ref["cases"]:
        b = case["body"]
        try:
            got = apply_template(t, b["messages"], b.get("tools"), b.get("add_generation_prompt", True),
                                 b.get("chat_template_kwargs"), now=now)
        except (jinja2.TemplateError, ChatInputError) as e:
            got = None
            err = str(e)
        if "error" in case:
            if got is not None:
                bad.append(f"{case['name']}: llama-server refused ({case['error'][:80]}), llamapy rendered")
        elif got != case["prompt"]:
            bad.append(f"{case['name']}:\n  want {case['prompt']!r}\n  got  {got if got is None else got!r}"
                       + (f" ({err})" if got is None else ""))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", REFS, ids=[p.stem for p in REFS])
def test_caps_match_llama_server(path: Path) -> None:
    ref = json.loads(path.read_text())
    assert _template(ref).caps.to_json() == ref["chat_template_caps"]
