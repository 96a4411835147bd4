"""A chat request's prompt, as llama-server's /apply-template and /v1/chat/completions render
it (tools/server/server-common.cpp oaicompat_chat_params_parse, common/chat.cpp
common_chat_templates_apply_jinja and common_chat_template_direct_apply_impl).

The template's context: messages (chat/inputs.py), bos_token, eos_token, enable_thinking
(the template's thinking support unless chat_template_kwargs says otherwise), tools (when
any), datetime ("%b %d %Y") and date_string ("%d %b %Y") of the local time, the
chat_template_kwargs (--chat-template-kwargs merged with the request's, values JSON),
preserve_reasoning (true, and with it preserve_thinking / clear_thinking /
truncate_history_thinking / drop_thinking), reasoning_effort (and reasoning_strength) when
given, add_generation_prompt only when true.

A last assistant message is continued (llama-server's prefill_assistant): the messages before
it are rendered without a generation prompt, then come the generation prompt (what
add_generation_prompt adds), the reasoning markers around its reasoning_content (templates
that think) and its content.  gpt-oss gets reasoning_content as "thinking" (llama.cpp's
common_chat_params_init_gpt_oss) and its own continuation.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..chat_template import ChatTemplate
from .inputs import ChatInputError, oaicompat_messages, oaicompat_tools, template_messages
from .thinking import analyze

_R, _X = "REASONING_PROBE_7f3a", "CONTENT_PROBE_7f3a"


@dataclass(slots=True)
class ChatOptions:
    """Server-wide chat settings: --jinja, --chat-template-kwargs, --reasoning-format,
    --reasoning-budget (llama-server's defaults)."""

    use_jinja: bool = True
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning_format: str = "auto"  # none | deepseek | deepseek-legacy | auto
    reasoning_budget: int = -1  # thinking tokens: -1 unrestricted, 0 the end tag at once (chat/budget.py)
    reasoning_budget_message: str = ""  # written before the forced end tag
    prefill_assistant: bool = True
    template: str | None = None  # --chat-template / --chat-template-file text (None: the GGUF's)


def is_gpt_oss(t: ChatTemplate) -> bool:
    return "<|channel|>" in t.source


def reasoning_tags(t: ChatTemplate) -> tuple[str, str]:
    """(start, end) around reasoning in an assistant turn; ("", "") for a template that does
    not think (found once per template).  Found by rendering a turn with and without
    reasoning_content; else as llama.cpp's analysis finds them (chat/thinking.py: the
    generation prompt with thinking off and on, reasoning shown only beside a tool call);
    templates that drop past reasoning but open <think> (QwQ, DeepSeek-R1 distills) get
    <think>/</think>."""
    if t.reasoning_markers is None:
        t.reasoning_markers = _find_reasoning_tags(t)
    return t.reasoning_markers


def _find_reasoning_tags(t: ChatTemplate) -> tuple[str, str]:
    if is_gpt_oss(t):
        return "<|channel|>analysis<|message|>", "<|end|>"
    base = [{"role": "user", "content": "U"}]
    ctx = {"bos_token": t.bos_token, "eos_token": t.eos_token, "enable_thinking": True}
    try:
        with_r = t.render_context({**ctx, "messages": base + [{"role": "assistant", "content": _X, "reasoning_content": _R}]})
        head = t.render_context({**ctx, "messages": base, "add_generation_prompt": True})
    except Exception:
        with_r = head = ""
    if _R in with_r and _X in with_r and with_r.index(_R) < with_r.index(_X):
        r = with_r.index(_R)
        start = with_r[_common(with_r, head):r]
        if start.strip():
            return start, with_r[r + len(_R):with_r.index(_X)]

    def render(c: dict[str, Any]) -> str:
        msgs = template_messages(oaicompat_messages(c["messages"]), t.caps)
        return t.render_context({"bos_token": t.bos_token, "eos_token": t.eos_token, **c, "messages": msgs})
    found = analyze(render, t.caps.supports_tool_calls)
    if found.found:  # llama.cpp's thinking_start_tag / thinking_end_tags: trimmed
        return found.start.strip(), found.end.strip()
    if "<think>" in t.source:
        return "<think>", "</think>"
    return "", ""


def _common(a: str, b: str) -> int:
    """The length of a's and b's common prefix."""
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i


def supports_thinking(t: ChatTemplate) -> bool:
    return reasoning_tags(t) != ("", "")


def _format_time(now: datetime, fmt: str) -> str:
    return now.strftime(fmt)


def template_context(t: ChatTemplate, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                     add_generation_prompt: bool, kwargs: dict[str, Any], now: datetime,
                     enable_thinking: bool) -> dict[str, Any]:
    ctx: dict[str, Any] = {"messages": messages, "bos_token": t.bos_token, "eos_token": t.eos_token,
                           "enable_thinking": enable_thinking}
    if tools:
        ctx["tools"] = tools
    ctx["datetime"] = _format_time(now, "%b %d %Y")
    ctx["date_string"] = _format_time(now, "%d %b %Y")
    ctx.update(kwargs)
    if add_generation_prompt:
        ctx["add_generation_prompt"] = True
    if isinstance(ctx.get("preserve_reasoning"), bool):
        on = ctx["preserve_reasoning"]
        ctx.update(preserve_thinking=on, clear_thinking=not on, truncate_history_thinking=not on, drop_thinking=not on)
    if isinstance(ctx.get("reasoning_effort"), str) and ctx["reasoning_effort"]:
        ctx["reasoning_strength"] = ctx["reasoning_effort"]
    return ctx


def request_kwargs(opts: ChatOptions, body_kwargs: dict[str, Any] | None, reasoning_effort: str | None) -> dict[str, Any]:
    """--chat-template-kwargs, llama-server's preserve_reasoning default, then the request's
    chat_template_kwargs and reasoning_effort ("none" turns thinking off)."""
    kw: dict[str, Any] = {"preserve_reasoning": True, **opts.template_kwargs, **(body_kwargs or {})}
    if "enable_thinking" in kw and isinstance(kw["enable_thinking"], str):
        raise ChatInputError('invalid type for "enable_thinking" (expected boolean, got string)')
    if reasoning_effort == "none":
        kw.pop("reasoning_effort", None)
        kw["enable_thinking"] = False
    elif reasoning_effort:
        kw["reasoning_effort"] = reasoning_effort
    return kw


def render_content(parts: list[Any], delimiter: str = "\n\n") -> str:
    """llama.cpp's common_chat_msg::render_content: the text parts joined by the delimiter."""
    text = ""
    for p in parts:
        if isinstance(p, dict) and p.get("type") == "text":
            text += (delimiter if text else "") + str(p.get("text", ""))
    return text


def apply_template(t: ChatTemplate, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                   add_generation_prompt: bool = True, chat_template_kwargs: dict[str, Any] | None = None,
                   reasoning_effort: str | None = None, opts: ChatOptions | None = None,
                   now: datetime | None = None) -> str:
    """The prompt llama-server renders for this request.  Raises ChatInputError for messages
    it refuses, jinja2.TemplateError when the template raises."""
    opts = opts or ChatOptions()
    now = now or datetime.now()
    kw = request_kwargs(opts, chat_template_kwargs, reasoning_effort)
    thinking = kw.get("enable_thinking", supports_thinking(t))
    if not isinstance(thinking, bool):
        thinking = bool(thinking)
    gpt_oss = is_gpt_oss(t)
    msgs = oaicompat_messages(messages, typed_content=t.caps.supports_typed_content)
    cont: dict[str, Any] | None = None
    if opts.prefill_assistant and msgs and msgs[-1]["role"] == "assistant":
        if len(msgs) >= 2 and msgs[-2]["role"] == "assistant":
            raise ChatInputError("Cannot have 2 or more assistant messages at the end of the list.")
        if msgs[-1].get("tool_calls"):
            raise ChatInputError("Cannot continue an assistant message that contains tool calls.")
        cont, msgs, add_generation_prompt = msgs[-1], msgs[:-1], False
    msgs = template_messages(msgs, t.caps, gpt_oss=gpt_oss)
    if gpt_oss:
        for m in msgs:
            if isinstance(m.get("reasoning_content"), str):
                m["thinking"] = m["reasoning_content"]
                if m.get("tool_calls"):
                    m.pop("content", None)
    tls = oaicompat_tools(tools)

    def render(agp: bool) -> str:
        return t.render_context(template_context(t, msgs, tls, agp, kw, now, thinking), now)

    prompt = render(add_generation_prompt)
    if cont is None:
        return prompt
    reasoning, content = cont.get("reasoning_content", ""), cont.get("content", "")
    if isinstance(messages[-1].get("content"), list):  # content parts: common_chat_msg::render_content
        content = render_content(messages[-1]["content"])
    content_mode = not (reasoning and not content)
    if gpt_oss:
        gen = "<|start|>assistant<|channel|>analysis<|message|>" + reasoning
        if content_mode:
            gen += "<|end|><|start|>assistant<|channel|>final<|message|>" + content
        return prompt + gen
    with_gp = render(True)
    gen = with_gp[_common(prompt, with_gp):]
    start, end = reasoning_tags(t)
    if start:
        k = gen.find(start)
        gen = (gen if k < 0 else gen[:k]) + start + reasoning
        if content_mode:
            gen += end
    if content_mode:
        gen += content if isinstance(content, str) else json.dumps(content)
    return prompt + gen
