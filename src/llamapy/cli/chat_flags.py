"""Chat-template and reasoning flags shared by run, chat and serve, as llama-server spells
them: --jinja/--no-jinja, --chat-template NAME|JINJA, --chat-template-file F,
--chat-template-kwargs JSON, --reasoning on|off|auto, --reasoning-format, --reasoning-budget, --reasoning-budget-message."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..chat.apply import ChatOptions
from ..chat.builtin import NAMES
from ..chat_template import CHATML_TEMPLATE

BUILTIN_TEMPLATES = {"chatml": CHATML_TEMPLATE}  # (with --jinja; every name of NAMES with --no-jinja)
REASONING_FORMATS = ("none", "deepseek", "deepseek-legacy", "auto")


def add_chat_template(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("chat template and reasoning (llama-server's flags)")
    g.add_argument("--jinja", dest="jinja", action="store_true", default=True,
                   help="render the chat template with Jinja (default: on)")
    g.add_argument("--no-jinja", dest="jinja", action="store_false", help="turn --jinja off (tools need it)")
    g.add_argument("--chat-template", default=None, metavar="NAME|JINJA",
                   help="the chat template: the Jinja text itself, or a built-in name (default: the GGUF's); "
                        f"with --no-jinja one of: {', '.join(NAMES)}")
    g.add_argument("--chat-template-file", default=None, metavar="F", help="the chat template read from file F")
    g.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                   help='extra template variables, a JSON object, e.g. \'{"enable_thinking": false}\'')
    g.add_argument("--reasoning-format", default="auto", choices=REASONING_FORMATS,
                   help="none: thoughts stay in content; deepseek/auto: <think>...</think> go to reasoning_content "
                        "(default: auto)")
    g.add_argument("-rea", "--reasoning", default="auto", metavar="on|off|auto",
                   help="thinking in the chat: on/off set the template's enable_thinking (a --chat-template-kwargs "
                        "value wins), auto leaves it to the template (default: auto)")
    g.add_argument("--reasoning-budget", type=int, default=-1, metavar="N",
                   help="token budget for thinking: -1 for unrestricted, 0 for immediate end, N>0 for token budget "
                        "(the end tag is forced when it is spent; default: -1)")
    g.add_argument("--reasoning-budget-message", default="", metavar="MESSAGE",
                   help="message injected before the end-of-thinking tag when the reasoning budget is exhausted "
                        "(default: none)")


def template_source(a: argparse.Namespace) -> str | None:
    """The --chat-template / --chat-template-file text, or None for the GGUF's own."""
    if a.chat_template is not None and a.chat_template_file is not None:
        raise ValueError("--chat-template and --chat-template-file both set: give one")
    if a.chat_template_file is not None:
        path = Path(a.chat_template_file)
        if not path.is_file():
            raise ValueError(f"--chat-template-file {path}: no such file")
        return path.read_text(encoding="utf-8")
    if a.chat_template is None:
        return None
    if a.chat_template in NAMES and not getattr(a, "jinja", True):
        return a.chat_template  # llama-server keeps the name: the built-in renderer reads it (chat/builtin.py)
    if a.chat_template in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[a.chat_template]
    if a.chat_template in NAMES:
        raise ValueError(f"--chat-template {a.chat_template}: a built-in (non-Jinja) template; use it with --no-jinja")
    if "{{" in a.chat_template or "{%" in a.chat_template:
        return a.chat_template
    raise ValueError(f"--chat-template {a.chat_template!r}: not a built-in name ({', '.join(NAMES)}) "
                     "nor Jinja text; use --chat-template-file for a file")


def template_kwargs(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        kw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--chat-template-kwargs: not JSON ({e})") from None
    if not isinstance(kw, dict):
        raise ValueError(f"--chat-template-kwargs: expected a JSON object, got {text[:60]}")
    return kw


def reasoning_kwargs(value: str) -> dict[str, Any]:
    """llama.cpp's --reasoning: on/enabled/true/1 and off/disabled/false/0 set enable_thinking, auto nothing."""
    if value in ("on", "enabled", "true", "1"):
        return {"enable_thinking": True}
    if value in ("off", "disabled", "false", "0"):
        return {"enable_thinking": False}
    if value in ("auto", "-1"):
        return {}
    raise ValueError(f"--reasoning {value!r}: expected on, off or auto")


def chat_options(a: argparse.Namespace) -> ChatOptions:
    if a.reasoning_budget < -1:
        raise ValueError(f"--reasoning-budget ({a.reasoning_budget}) must be -1 (unrestricted) or >= 0")
    kwargs = reasoning_kwargs(getattr(a, "reasoning", "auto")) | template_kwargs(a.chat_template_kwargs)
    return ChatOptions(use_jinja=a.jinja, template_kwargs=kwargs,
                       reasoning_format=a.reasoning_format, reasoning_budget=a.reasoning_budget,
                       reasoning_budget_message=a.reasoning_budget_message,
                       template=template_source(a))
