"""The messages and tools a chat template sees, prepared as llama-server prepares them
(common/chat.cpp: common_chat_msgs_parse_oaicompat, common_chat_msg::to_json_oaicompat and
the workarounds of common_chat_templates_apply_jinja):

  - each message becomes {"role", "content"} ("" when null or absent; typed text parts joined
    with "\\n" unless the template reads typed content), then "reasoning_content" (when not
    empty), "name", "tool_call_id", "tool_calls" ([{"type": "function", "function": {"name",
    "arguments"}, "id"?}], arguments a JSON string);
  - "developer" becomes "system" (not for gpt-oss, whose template knows it);
  - a template that ignores the system role gets the system prompt merged into the next
    message ("system\\nnext"), or dropped when it is the only message;
  - a template that reads arguments as an object gets them parsed (an error when not JSON);
  - tools become [{"type": "function", "function": {"name", "description", "parameters"}}].
"""
from __future__ import annotations

import json
from typing import Any

from .caps import TemplateCaps


class ChatInputError(ValueError):
    """Messages or tools llama-server would refuse; the message names the problem (HTTP 400)."""


def _content(m: dict[str, Any], typed: bool) -> Any:
    c = m.get("content")
    if c is None or isinstance(c, str):
        return c or ""
    if not isinstance(c, list):
        raise ChatInputError(f"Invalid 'content' type: expected string or array, got {json.dumps(c)}")
    parts = []
    for p in c:
        if not isinstance(p, dict) or p.get("type") not in ("text", "media_marker"):
            raise ChatInputError(f"Unsupported content part: {json.dumps(p)}")
        parts.append({"type": p["type"], "text": p.get("text", "")})
    if typed:
        return parts or ""
    return "\n".join(p["text"] for p in parts if p["type"] == "text")


def _tool_calls(m: dict[str, Any], i: int) -> list[dict[str, Any]]:
    out = []
    for j, tc in enumerate(m.get("tool_calls") or []):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or "name" not in fn or tc.get("type", "function") != "function":
            raise ChatInputError(f"messages[{i}].tool_calls[{j}]: expected {{\"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}")
        args = fn.get("arguments", "")
        call: dict[str, Any] = {"type": "function", "function": {
            "name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}}
        if tc.get("id"):
            call["id"] = tc["id"]
        out.append(call)
    return out


def oaicompat_messages(messages: list[dict[str, Any]], typed_content: bool = False) -> list[dict[str, Any]]:
    """OpenAI messages as llama.cpp hands them to a template (before the workarounds)."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ChatInputError(f"messages[{i}]: missing 'role'")
        if "content" not in m and "tool_calls" not in m:
            raise ChatInputError(f"messages[{i}]: expected 'content' or 'tool_calls'")
        j: dict[str, Any] = {"role": m["role"], "content": _content(m, typed_content)}
        if m.get("reasoning_content"):
            j["reasoning_content"] = m["reasoning_content"]
        if m.get("name"):
            j["name"] = m["name"]
        if m.get("tool_call_id"):
            j["tool_call_id"] = m["tool_call_id"]
        calls = _tool_calls(m, i)
        if calls:
            j["tool_calls"] = calls
        out.append(j)
    return out


def template_messages(messages: list[dict[str, Any]], caps: TemplateCaps, gpt_oss: bool = False) -> list[dict[str, Any]]:
    """The workarounds: developer -> system, system merged when unsupported, object arguments."""
    msgs = [dict(m) for m in messages]
    if not gpt_oss:
        for m in msgs:
            if m["role"] == "developer":
                m["role"] = "system"
    if not caps.supports_system_role and msgs and msgs[0]["role"] == "system":
        first = msgs.pop(0)
        if msgs:
            msgs[0]["content"] = f"{first['content']}\n{msgs[0]['content']}"
    if caps.supports_object_arguments:
        for i, m in enumerate(msgs):
            if "tool_calls" not in m:
                continue
            calls = []
            for j, tc in enumerate(m["tool_calls"]):
                fn = dict(tc["function"])
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except json.JSONDecodeError as e:
                    raise ChatInputError(f"messages[{i}].tool_calls[{j}]: Failed to parse tool call arguments as JSON: {e}") from None
                calls.append({**tc, "function": fn})
            m["tool_calls"] = calls
    return msgs


def oaicompat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """common_chat_tools_to_json_oaicompat: name, description ("" when absent), parameters."""
    out = []
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict):
            raise ChatInputError(f"tools[{i}]: Unsupported tool type (expected {{\"type\": \"function\", \"function\": {{...}}}})")
        f = t["function"]
        out.append({"type": "function", "function": {"name": f.get("name"), "description": f.get("description", ""),
                                                     "parameters": f.get("parameters", {})}})
    return out
