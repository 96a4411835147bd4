"""OpenAI Responses requests as OpenAI chat requests, as llama-server converts them
(server-chat.cpp server_chat_convert_responses_to_chatcmpl): `instructions` becomes a system
message; `input` (a string, or a list of items: messages with input_text / output_text parts,
function_call, function_call_output, reasoning) becomes the messages, a function_call merged
into the assistant message before it; function `tools` ({type, name, description, parameters})
become chat functions; `max_output_tokens` max_tokens, `reasoning.effort` reasoning_effort,
`text.format` response_format.  Every other field passes through (llama-server's sampling
fields: top_k, min_p, seed, stop, ...)."""
from __future__ import annotations

from typing import Any

from .api_error import APIError

# the Responses fields that are converted (the rest of the body passes through as it is)
CONVERTED = ("input", "instructions", "tools", "tool_choice", "max_output_tokens", "reasoning", "text",
             "previous_response_id", "store", "include", "truncation", "metadata", "user", "prompt_cache_key")


def _no_images(where: str) -> APIError:
    # llama-server answers image input to a model without a vision projector with a 500 and
    # "image input is not supported" (as on /v1/messages)
    return APIError(500, f"{where}: image input is not supported by this model (no vision encoder)")


def _input_parts(parts: list[Any], where: str, kinds: tuple[str, ...]) -> list[dict[str, str]]:
    """A message's content parts as chat text parts (kinds: the text part types allowed)."""
    out = []
    for j, p in enumerate(parts):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in kinds:
            if not isinstance(p.get("text"), str):
                raise APIError(400, f"{where}[{j}].text: a {kind} part needs its text (a string)")
            out.append({"type": "text", "text": p["text"]})
        elif kind == "refusal" and "output_text" in kinds:
            out.append({"type": "text", "text": str(p.get("refusal", ""))})
        elif kind == "input_image":
            raise _no_images(f"{where}[{j}]")
        elif kind == "input_file":
            raise APIError(400, f"{where}[{j}].type: 'input_file' is not supported by llamapy")
        else:
            raise APIError(400, f"{where}[{j}].type: {kind!r} is not one of {', '.join(kinds)}")
    return out


def _append_assistant(messages: list[dict[str, Any]], **fields: Any) -> None:
    """Merge into the assistant message before it, or start one (llama-server's merge_prev)."""
    if messages and messages[-1]["role"] == "assistant":
        prev = messages[-1]
        for k, v in fields.items():
            if k == "content":
                prev["content"] = (prev["content"] or []) + v
            elif k == "tool_calls":
                prev["tool_calls"] = prev.get("tool_calls", []) + v
            else:
                prev[k] = v
        return
    messages.append({"role": "assistant", "content": fields.pop("content", []), **fields})


def _item(i: int, item: Any, messages: list[dict[str, Any]]) -> None:
    """One input item, appended to messages."""
    where = f"input[{i}]"
    if not isinstance(item, dict):
        raise APIError(400, f"{where}: expected an object (a message or an item), got {type(item).__name__}")
    kind, role = item.get("type"), item.get("role")
    if role is not None and kind in (None, "message"):
        content = item.get("content")
        if isinstance(content, str):
            content = [{"type": "output_text" if role == "assistant" else "input_text", "text": content}]
        if not isinstance(content, list):
            raise APIError(400, f"{where}.content: expected a string or a list of content parts")
        if role in ("user", "system", "developer"):
            messages.append({"role": role, "content": _input_parts(content, f"{where}.content", ("input_text",))})
        elif role == "assistant":
            _append_assistant(messages, content=_input_parts(content, f"{where}.content", ("output_text", "input_text")))
        else:
            raise APIError(400, f"{where}.role: {role!r} is not one of user, system, developer, assistant")
    elif kind == "function_call":
        for k in ("call_id", "name", "arguments"):
            if not isinstance(item.get(k), str):
                raise APIError(400, f"{where}.{k}: a function_call needs its {k} (a string)")
        call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
        _append_assistant(messages, tool_calls=[call])
    elif kind == "function_call_output":
        out = item.get("output")
        if not isinstance(item.get("call_id"), str):
            raise APIError(400, f"{where}.call_id: a function_call_output needs the call_id of its call")
        if isinstance(out, list):
            out = "".join(p["text"] for p in _input_parts(out, f"{where}.output", ("input_text",)))
        if not isinstance(out, str):
            raise APIError(400, f"{where}.output: expected a string or a list of input_text parts")
        messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": out})
    elif kind == "reasoning":
        parts = item.get("content") or []
        text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
        _append_assistant(messages, reasoning_content=text)
    else:
        raise APIError(400, f"{where}.type: {kind!r} is not a message, function_call, function_call_output or reasoning item")


def _tools(tools: Any) -> list[dict[str, Any]]:
    """Function tools as chat tools.  Others (web_search, file_search, ...) have no chat form:
    llama-server skips them, and so does llamapy."""
    if not isinstance(tools, list):
        raise APIError(400, "tools: expected a list of tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise APIError(400, f"tools[{i}]: expected an object")
        if t.get("type") != "function":
            continue
        fn = {k: v for k, v in t.items() if k in ("name", "description", "parameters", "strict") and v is not None}
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(tc: Any) -> Any:
    """auto | none | required, or {type: function, name} as chat's named choice."""
    if isinstance(tc, dict) and tc.get("type") == "function":
        if not isinstance(tc.get("name"), str):
            raise APIError(400, 'tool_choice: {"type": "function"} needs the function\'s "name"')
        return {"type": "function", "function": {"name": tc["name"]}}
    return tc


def _format(text: Any) -> dict[str, Any] | None:
    """text.format as chat's response_format: text, json_object, or json_schema {name, schema, strict}."""
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_schema":
        return {"type": "json_schema", "json_schema": {k: fmt[k] for k in ("name", "schema", "strict") if k in fmt}}
    return {"type": fmt["type"]}


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat request body (schemas.ChatCompletionRequest's fields) for a Responses body."""
    if "input" not in body:
        raise APIError(400, "input: required (a string, or a list of input items)")
    if body.get("previous_response_id"):
        raise APIError(400, "previous_response_id: llamapy keeps no responses; send the whole conversation in input")
    messages: list[dict[str, Any]] = []
    if body.get("instructions") is not None:
        if not isinstance(body["instructions"], str):
            raise APIError(400, "instructions: expected a string")
        messages.append({"role": "system", "content": body["instructions"]})
    inp = body["input"]
    if isinstance(inp, str):
        messages.append({"role": "user", "content": inp})
    elif isinstance(inp, list):
        for i, item in enumerate(inp):
            _item(i, item, messages)
    else:
        raise APIError(400, "input: expected a string or a list of input items")
    for m in messages:
        if m["role"] == "assistant" and m["content"] == [] and m.get("tool_calls"):
            m["content"] = ""
    chat = {k: v for k, v in body.items() if k not in CONVERTED}
    chat["messages"] = messages
    if body.get("tools") is not None:
        if tools := _tools(body["tools"]):
            chat["tools"] = tools
    if body.get("tool_choice") is not None and "tools" in chat:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if isinstance(body.get("reasoning"), dict) and body["reasoning"].get("effort") is not None:
        chat["reasoning_effort"] = body["reasoning"]["effort"]
    if (rf := _format(body.get("text"))) is not None:
        chat["response_format"] = rf
    return chat
