"""Chat templates: the GGUF's `tokenizer.chat_template` rendered with Jinja2 as HF does.

Environment as transformers' apply_chat_template: ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, `raise_exception(msg)`,
`strftime_now(fmt)` and a `tojson` filter that does not HTML-escape (ensure_ascii=False).
Context: messages, add_generation_prompt, bos_token, eos_token, plus any extra keywords
(tools, documents, enable_thinking, ...).  As llama.cpp's interpreter, a string `+` an
undefined or none value is the string (TemplateEnvironment).

When the GGUF carries no template, CHATML_TEMPLATE (llama.cpp's CHATML_TEMPLATE_SRC,
common/chat.cpp) is used:
    <|im_start|>{role}\\n{content}<|im_end|>\\n   per message, then
    <|im_start|>assistant\\n                      when add_generation_prompt.

As llama.cpp's common_chat_template_direct_apply, a rendered prompt loses a leading
bos_token when the vocab adds BOS itself (and a trailing eos_token when it adds EOS), so
tokenize(render(...), add_special=True) does not start with two BOS.
"""
from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .chat.caps import TemplateCaps, mark_read, probe_caps

CHATML_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}"
)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | list[str] | None = None, sort_keys: bool = False) -> str:
    """llama.cpp's tojson (common/jinja/value.cpp): items joined by ", " (by "," with an
    indent), keys by ": ", unless `separators` says otherwise; no HTML escaping."""
    mark_read(x)
    seps = (list(separators) if separators else []) + [None, None]
    item = seps[0] if seps[0] is not None else (", " if indent is None else ",")
    key = seps[1] if seps[1] is not None else ": "
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=(item, key), sort_keys=sort_keys,
                      default=_json_default)


def _json_default(o: Any) -> Any:
    """Jinja values json does not know: a map/select result (a generator) is a list, an
    undefined value null."""
    if isinstance(o, jinja2.Undefined):
        return None
    try:
        return list(o)
    except TypeError:
        raise TypeError(f"tojson: cannot serialise a {type(o).__name__}") from None


def strftime_now_at(now: datetime | None) -> Any:
    """strftime_now(fmt) for a render: the local time `now` (the current time when None)."""
    def strftime_now(fmt: str) -> str:
        return (now or datetime.now()).strftime(fmt)
    return strftime_now


class TemplateEnvironment(ImmutableSandboxedEnvironment):
    """HF's sandbox with llama.cpp's concatenation rule (common/jinja/runtime.cpp
    binary_expression, workaround_concat_null_with_str): `a + b` where one side is a string and
    the other undefined or none is the string alone.  Templates rely on it: firefunction-v2
    adds a `functions` variable nobody passes to its system prompt."""

    intercepted_binops = frozenset(["+"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+":
            l_null = left is None or isinstance(left, jinja2.Undefined)
            r_null = right is None or isinstance(right, jinja2.Undefined)
            if (l_null and isinstance(right, str)) or (r_null and isinstance(left, str)):
                return ("" if l_null else left) + ("" if r_null else right)
        return super().call_binop(context, operator, left, right)


def make_environment() -> ImmutableSandboxedEnvironment:
    env = TemplateEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = strftime_now_at(None)
    return env


class ChatTemplate:
    """A compiled chat template plus the special-token strings templates refer to."""

    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "",
                 add_bos: bool = False, add_eos: bool = False) -> None:
        self.is_default = not source
        self.source = source or CHATML_TEMPLATE
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.add_bos = add_bos
        self.add_eos = add_eos
        try:
            self._template = make_environment().from_string(self.source)
        except jinja2.TemplateSyntaxError as e:
            raise ValueError(f"tokenizer.chat_template does not compile: {e} (line {e.lineno})") from e
        self._caps: TemplateCaps | None = None
        self.reasoning_markers: tuple[str, str] | None = None  # chat/apply.py reasoning_tags, found once

    @property
    def caps(self) -> TemplateCaps:
        """What the template does with system messages, tools and tool calls (chat/caps.py)."""
        if self._caps is None:
            checks_string = re.search(r"is\s+(not\s+)?string", self.source) is not None
            self._caps = probe_caps(self._template, checks_string=checks_string)
        return self._caps

    def render_context(self, ctx: dict[str, Any], now: datetime | None = None) -> str:
        """The template rendered with exactly `ctx` (messages, tools, add_generation_prompt,
        bos_token, ...), strftime_now reading `now`; a leading BOS / trailing EOS dropped as
        in render."""
        out = self._template.render(**ctx, strftime_now=strftime_now_at(now))
        return self._strip_special(out)

    def _strip_special(self, out: str) -> str:
        if self.add_bos and self.bos_token and out.startswith(self.bos_token):
            out = out[len(self.bos_token):]
        if self.add_eos and self.eos_token and out.endswith(self.eos_token):
            out = out[:-len(self.eos_token)]
        return out

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               **extra: Any) -> str:
        """The prompt text for `messages` ([{"role": ..., "content": ...}, ...]).

        Raises jinja2.TemplateError when the template calls raise_exception (e.g. Gemma's
        "Conversation roles must alternate user/assistant/user/assistant/...")."""
        ctx = {"bos_token": self.bos_token, "eos_token": self.eos_token, **extra}
        out = self._template.render(messages=messages,
                                    add_generation_prompt=add_generation_prompt, **ctx)
        return self._strip_special(out)
