"""OpenAI tool calls over any chat template.

Two formats, chosen from the chat template:

hermes -- a template that renders `tools` itself and writes calls as <tool_call> blocks
(Hermes 2 Pro, Qwen 2.5/3 and their fine-tunes; llama.cpp's COMMON_CHAT_FORMAT_HERMES_2_PRO):
the template gets `tools` and the messages as they are, and a call is

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

generic -- every other template, the registered models' (SmolLM2, Gemma 3) included: tools
are described in the system prompt (llama-server's generic handler, common/chat.cpp), and a
call is a JSON object:

    {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    {"tool_calls": [{"name": ..., "arguments": {...}, "id": "..."}, ...]}   (parallel_tool_calls)

Earlier turns are written the same way: an assistant message's tool_calls become that JSON as
its content, and a `tool` message becomes a user message {"tool_response": {"tool": name,
"tool_call_id": id, "content": ...}} (minja's polyfills, which llama-server applies for
templates without tool roles).

Decoding (the grammar, llguidance Lark):
  - tool_choice "required" or a named function: the output is the call JSON, each call's
    arguments constrained to its function's parameter schema;
  - "auto": plain text (not starting with "{", or "<" for hermes) or a call, constrained
    from its first byte;
  - "none": no tools rendered, no grammar.
Templates that render tools in another syntax (Llama 3.x, Mistral, ...) get the generic
format, with the tools in the system prompt rather than the template's own syntax.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..grammar.compiler import closed_objects

SYSTEM_HEADER = (
    "You can call tools. To call one, reply with only a JSON object, with no text before or after it:\n"
)


class ToolError(ValueError):
    """A tools / tool_choice / messages problem; the message names it (an HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(slots=True)
class ToolPlan:
    """What a request's tools turn into: the functions offered, the choice, the grammar (Lark
    text, or None for "none"), and whether calls are a list."""

    functions: list[Function]
    choice: str  # auto | none | required | the forced function's name
    parallel: bool
    fmt: str = "generic"  # generic | hermes
    lark: str | None = None
    system: str = ""
    by_name: dict[str, Function] = field(default_factory=dict)
    offered: list[Function] = field(default_factory=list)  # what the model may call (none for "none")

    def template_tools(self) -> list[dict[str, Any]]:
        """The offered functions as a chat template's `tools` variable (OpenAI's shape)."""
        return [{"type": "function", "function": {"name": f.name, "description": f.description, "parameters": f.parameters}}
                for f in self.offered]


def parse_tools(tools: list[dict[str, Any]] | None) -> list[Function]:
    """The request's `tools`, checked: function type, a name, parameters a JSON Schema object."""
    out: list[Function] = []
    seen: set[str] = set()
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(t.get("function"), dict):
            raise ToolError(f"tools[{i}]: only {{\"type\": \"function\", \"function\": {{...}}}} tools are supported")
        f = t["function"]
        name = f.get("name")
        if not isinstance(name, str) or not name:
            raise ToolError(f"tools[{i}].function.name: a non-empty string is required")
        if name in seen:
            raise ToolError(f"tools[{i}].function.name: {name!r} appears twice")
        seen.add(name)
        params = f.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise ToolError(f"tools[{i}].function.parameters ({name}): must be a JSON Schema object "
                            f"({{\"type\": \"object\", ...}}), got {json.dumps(params)[:80]}")
        out.append(Function(name, str(f.get("description") or ""), params))
    return out


def parse_choice(choice: Any, functions: list[Function]) -> str:
    """tool_choice as auto | none | required | a function name (checked against tools)."""
    if choice is None:
        return "auto" if functions else "none"
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise ToolError(f"tool_choice: {choice!r} is not one of auto, none, required or {{\"type\": \"function\", ...}}")
        name = choice
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict) and isinstance(choice["function"].get("name"), str):
        name = choice["function"]["name"]
        if name not in {f.name for f in functions}:
            known = ", ".join(f.name for f in functions) or "none"
            raise ToolError(f"tool_choice names function {name!r}, which is not in tools (tools: {known})")
        return name
    else:
        raise ToolError('tool_choice: expected "auto", "none", "required" or {"type": "function", "function": {"name": ...}}')
    if name != "none" and not functions:
        raise ToolError(f"tool_choice {name!r} needs tools")
    return name


def call_schema(fns: list[Function], parallel: bool) -> dict[str, Any]:
    """The JSON Schema of a call (or a list of calls) to one of fns."""
    def one(f: Function) -> dict[str, Any]:
        props: dict[str, Any] = {"name": {"const": f.name}, "arguments": closed_objects(f.parameters)}
        req = ["name", "arguments"]
        if parallel:
            props["id"] = {"type": "string", "minLength": 4, "maxLength": 32, "pattern": "^[A-Za-z0-9_]+$"}
            req.append("id")
        return {"type": "object", "properties": props, "required": req, "additionalProperties": False}
    item = one(fns[0]) if len(fns) == 1 else {"anyOf": [one(f) for f in fns]}
    if parallel:
        return {"type": "object", "properties": {"tool_calls": {"type": "array", "items": item, "minItems": 1}},
                "required": ["tool_calls"], "additionalProperties": False}
    return {"type": "object", "properties": {"tool_call": item}, "required": ["tool_call"], "additionalProperties": False}


def template_format(source: str) -> str:
    """hermes for a template that renders `tools` and <tool_call> blocks, else generic."""
    return "hermes" if "tools" in source and "<tool_call>" in source else "generic"


def hermes_lark(fns: list[Function], choice: str, parallel: bool) -> str:
    """<tool_call> blocks, each a {"name", "arguments"} object for one of fns."""
    def one(f: Function) -> dict[str, Any]:
        return {"type": "object", "properties": {"name": {"const": f.name}, "arguments": closed_objects(f.parameters)},
                "required": ["name", "arguments"], "additionalProperties": False}
    schema = one(fns[0]) if len(fns) == 1 else {"anyOf": [one(f) for f in fns]}
    calls = 'call ("\\n" call)*' if parallel else "call"
    head = f"start: {calls}\n" if choice != "auto" else f"start: TEXT | {calls}\nTEXT: /[^<\\s][\\s\\S]*/\n"
    return head + 'call: "<tool_call>\\n" body "\\n</tool_call>"\n' + f"body: %json {json.dumps(schema, separators=(',', ':'))}\n"


def plan(tools: list[dict[str, Any]] | None, choice: Any, parallel: bool, fmt: str = "generic") -> ToolPlan | None:
    """The request's ToolPlan, or None when it has no tools.  Raises ToolError."""
    fns = parse_tools(tools)
    c = parse_choice(choice, fns)
    if not fns:
        return None
    p = ToolPlan(fns, c, parallel, fmt, by_name={f.name: f for f in fns})
    if c == "none":
        return p
    offered = p.offered = fns if c in ("auto", "required") else [p.by_name[c]]
    if fmt == "hermes":  # the template describes the tools; the grammar holds the calls to them
        p.lark = hermes_lark(offered, c, parallel)
        return p
    if fmt != "generic":  # a family's own call syntax (chat/tool_syntax.py)
        from .tool_syntax import call_lark

        p.lark = call_lark(fmt, offered, c, parallel, closed_objects)
        return p
    schema = json.dumps(call_schema(offered, parallel), separators=(",", ":"))
    call = f"call: %json {schema}\n"
    p.lark = ("start: call\n" + call) if c != "auto" else ("start: TEXT | call\nTEXT: /[^{\\s][\\s\\S]*/\n" + call)
    example = ({"tool_calls": [{"name": offered[0].name, "arguments": {}, "id": "call_1"}]} if parallel
               else {"tool_call": {"name": offered[0].name, "arguments": {}}})
    lines = [SYSTEM_HEADER + json.dumps(example), "", "The tools:"]
    for f in offered:
        lines.append(json.dumps({"name": f.name, "description": f.description, "parameters": f.parameters}, ensure_ascii=False))
    if c == "auto":
        lines += ["", "If no tool is needed, answer in plain text."]
    elif c == "required":
        lines += ["", "You must call a tool."]
    else:
        lines += ["", f"You must call {c}."]
    p.system = "\n".join(lines)
    return p


def render_messages(messages: list[dict[str, Any]], p: ToolPlan | None, fmt: str = "generic") -> list[dict[str, Any]]:
    """Messages for the template.  generic: the tools' description merged into the system
    prompt; assistant tool_calls and tool results written as the generic JSON.  hermes: as
    they are, with each call's arguments as an object (what tool templates index into)."""
    if fmt == "hermes":
        return [_hermes_message(m, i) for i, m in enumerate(messages)]
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        role, content = m["role"], m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for j, tc in enumerate(m["tool_calls"]):
                fn = tc.get("function") or {}
                args = fn.get("arguments", "{}")
                try:
                    args = json.loads(args) if isinstance(args, str) else args
                except json.JSONDecodeError:
                    raise ToolError(f"messages[{i}].tool_calls[{j}].function.arguments is not JSON") from None
                calls.append({"name": fn.get("name", ""), "arguments": args, **({"id": tc["id"]} if tc.get("id") else {})})
            body = {"tool_calls": calls} if len(calls) > 1 or (p is not None and p.parallel) else {"tool_call": calls[0]}
            out.append({"role": "assistant", "content": (content + "\n" if content else "") + json.dumps(body, ensure_ascii=False)})
        elif role == "tool":
            resp = {"tool": m.get("name") or "", "tool_call_id": m.get("tool_call_id") or "", "content": content}
            out.append({"role": "user", "content": json.dumps({"tool_response": resp}, ensure_ascii=False)})
        else:
            out.append({"role": role, "content": content})
    if p is not None and p.system:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + p.system}
        else:
            out.insert(0, {"role": "system", "content": p.system})
    return out


def _hermes_message(m: dict[str, Any], i: int) -> dict[str, Any]:
    if not m.get("tool_calls"):
        return m
    calls = []
    for j, tc in enumerate(m["tool_calls"]):
        fn = dict(tc.get("function") or {})
        if isinstance(fn.get("arguments"), str):
            try:
                fn["arguments"] = json.loads(fn["arguments"])
            except json.JSONDecodeError:
                raise ToolError(f"messages[{i}].tool_calls[{j}].function.arguments is not JSON") from None
        calls.append({**tc, "function": fn})
    return {**m, "tool_calls": calls}


def call_prefix(p: ToolPlan) -> str:
    """What an answer that is a call starts with."""
    return "<tool_call>" if p.fmt == "hermes" else "{"


_HERMES_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


def _openai_call(c: dict[str, Any]) -> dict[str, Any]:
    cid = c.get("id") if isinstance(c.get("id"), str) else ""
    return {"id": cid or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": c.get("name", ""), "arguments": json.dumps(c.get("arguments", {}), ensure_ascii=False)}}


def parse_output(text: str, p: ToolPlan | None) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) of a finished answer: a call becomes OpenAI tool_calls
    (arguments as a JSON string, a fresh call id unless the model wrote one), anything else
    is content."""
    if p is None or p.lark is None or not text.lstrip().startswith(call_prefix(p)):
        return text, []
    if p.fmt == "hermes":
        try:
            calls = [json.loads(m.group(1)) for m in _HERMES_CALL.finditer(text)]
        except json.JSONDecodeError:
            return text, []
        rest = _HERMES_CALL.sub("", text).strip()
        return (rest or None), [_openai_call(c) for c in calls if isinstance(c, dict)]
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:  # an unfinished call (max_tokens): left as text
        return text, []
    if not isinstance(obj, dict):
        return text, []
    raw = obj.get("tool_calls") if isinstance(obj.get("tool_calls"), list) else ([obj["tool_call"]] if isinstance(obj.get("tool_call"), dict) else None)
    if raw is None:
        return (obj["response"], []) if isinstance(obj.get("response"), str) else (text, [])
    return None, [_openai_call(c) for c in raw if isinstance(c, dict)]
