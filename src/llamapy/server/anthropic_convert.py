"""Anthropic Messages requests as OpenAI chat requests, as llama-server converts them
(server-chat.cpp server_chat_convert_anthropic_to_oai): `system` (a string or text blocks)
becomes a system message; content blocks become the message's text, its tool_calls
(tool_use), reasoning_content (thinking) and, for tool_result blocks, tool messages after it;
`tools` ({name, description, input_schema}) become functions; `stop_sequences` the stop
strings.  And the errors of the Anthropic routes, in Anthropic's shape."""
from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from .api_error import APIError

DEFAULT_MAX_TOKENS = 4096  # llama-server's when max_tokens is absent (Anthropic requires it; llama-server does not)
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 422: "invalid_request_error",
               429: "rate_limit_error", 503: "overloaded_error"}  # any other: api_error
ANTHROPIC_PATHS = ("/v1/messages",)


def is_anthropic_path(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in ANTHROPIC_PATHS)


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


def anthropic_error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(anthropic_error_body(status, message), status_code=status, headers=headers)


class MessagesRequest(BaseModel):
    """POST /v1/messages and /v1/messages/count_tokens.  Unknown fields (metadata, cache_control,
    service_tier, ...) are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    system: str | list[dict[str, Any]] | None = None
    messages: list[dict[str, Any]]
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    stream: bool = False
    thinking: dict[str, Any] | None = None  # accepted; no thinking budget is applied
    chat_template_kwargs: dict[str, Any] | None = None  # llama-server passes it through


def _text_of(blocks: list[Any], where: str) -> str:
    """The text of a tool_result's content blocks (only text: no model here reads images)."""
    out = []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            out.append(str(b.get("text", "")))
        elif kind == "image":
            raise _no_images(f"{where}[{j}]")
        else:
            raise APIError(400, f"{where}[{j}].type: {kind!r} is not a tool_result content block (text)")
    return "".join(out)


def _no_images(where: str) -> APIError:
    # llama-server answers image input to a model without a vision projector with a 500 and
    # "image input is not supported"; its test suite checks both
    return APIError(500, f"{where}: image input is not supported by this model (no vision encoder)")


def _message(i: int, msg: dict[str, Any]) -> list[dict[str, Any]]:
    """One Anthropic message as OpenAI messages: itself, then a tool message per tool_result."""
    role = msg.get("role")
    if role not in ("user", "assistant"):
        raise APIError(400, f"messages[{i}].role: {role!r} is not one of user, assistant (the system prompt goes in `system`)")
    content = msg.get("content")
    if content is None:
        return [] if role == "assistant" else [{"role": role, "content": ""}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise APIError(400, f"messages[{i}].content: expected a string or a list of content blocks")
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    reasoning = ""
    for j, b in enumerate(content):
        where = f"messages[{i}].content[{j}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            texts.append({"type": "text", "text": str(b.get("text", ""))})
        elif kind == "thinking":
            reasoning += str(b.get("thinking", ""))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            calls.append({"id": str(b.get("id", "")), "type": "function",
                          "function": {"name": str(b.get("name", "")), "arguments": json.dumps(b.get("input", {}))}})
        elif kind == "tool_result":
            rc = b.get("content")
            text = rc if isinstance(rc, str) else _text_of(rc, f"{where}.content") if isinstance(rc, list) else ""
            results.append({"role": "tool", "tool_call_id": str(b.get("tool_use_id", "")), "content": text})
        elif kind in ("image", "document"):
            raise _no_images(where)
        else:
            raise APIError(400, f"{where}.type: {kind!r} is not one of text, thinking, tool_use, tool_result")
    out: list[dict[str, Any]] = []
    if texts or calls or reasoning:
        m: dict[str, Any] = {"role": role, "content": texts or ""}
        if calls:
            m["tool_calls"] = calls
        if reasoning:
            m["reasoning_content"] = reasoning
        out.append(m)
    return out + results


def _tool_choice(tc: dict[str, Any] | None) -> Any:
    """auto | any (a call, any tool) | tool (that one) | none, as OpenAI's tool_choice."""
    if tc is None:
        return None
    kind = tc.get("type")
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    if kind == "none":
        return "none"
    if kind == "tool":
        name = tc.get("name")
        if not isinstance(name, str) or not name:
            raise APIError(400, 'tool_choice: {"type": "tool"} needs the tool\'s "name"')
        return {"type": "function", "function": {"name": name}}
    raise APIError(400, f"tool_choice.type: {kind!r} is not one of auto, any, tool, none")


def to_openai(body: MessagesRequest) -> dict[str, Any]:
    """The OpenAI chat request body (schemas.ChatCompletionRequest's fields) for body."""
    messages: list[dict[str, Any]] = []
    if body.system is not None:
        system = body.system if isinstance(body.system, str) else \
            "".join(str(b.get("text", "")) for b in body.system if b.get("type") == "text")
        messages.append({"role": "system", "content": system})
    for i, m in enumerate(body.messages):
        messages.extend(_message(i, m))
    oai: dict[str, Any] = {"messages": messages, "stream": body.stream,
                           "max_tokens": body.max_tokens if body.max_tokens is not None else DEFAULT_MAX_TOKENS}
    if body.stop_sequences:
        oai["stop"] = body.stop_sequences
    for k in ("temperature", "top_p", "top_k", "chat_template_kwargs"):
        if (v := getattr(body, k)) is not None:
            oai[k] = float(v) if k in ("temperature", "top_p") else v
    if body.tools:
        oai["tools"] = [{"type": "function", "function": {"name": t.get("name", ""), "description": t.get("description", ""),
                                                          "parameters": t.get("input_schema", {})}} for t in body.tools]
    if (tc := _tool_choice(body.tool_choice)) is not None:
        oai["tool_choice"] = tc
    if body.tool_choice is not None and body.tool_choice.get("disable_parallel_tool_use") is False:
        oai["parallel_tool_calls"] = True
    return oai
