"""create_chat_completion: messages through the model's chat template, tools and
response_format through the server's own tool plan and constraints (server/tools.py,
server/constraints.py), the answer as llama-cpp-python's chat.completion dict or its
chat.completion.chunk stream."""
from __future__ import annotations

import time
import uuid
from typing import Any, Iterator

from ..server import tools
from ..server.api_error import APIError
from ..server.constraints import request_spec
from .completion import GenOptions, check_final, usage
from .engine import Engine


def prepare(eng: Engine, messages: list[dict[str, Any]], tool_list: list[dict[str, Any]] | None, tool_choice: Any,
            response_format: dict[str, Any] | None, grammar: str | None,
            parallel_tool_calls: bool = False) -> tuple[list[int], Any, tools.ToolPlan | None]:
    """(prompt ids, constraint, tool plan whose calls may come) as the server's
    /v1/chat/completions builds them; ValueError for what the server answers with a 400."""
    tok = eng.model.tokenizer
    fmt = tools.template_format(tok.chat.source)
    try:
        plan = tools.plan(tool_list, tool_choice, parallel_tool_calls, fmt)
        msgs = tools.render_messages([dict(m) for m in messages], plan, fmt)
        spec = request_spec(grammar, None, response_format, plan)
    except (tools.ToolError, APIError) as e:
        raise ValueError(getattr(e, "message", str(e))) from None
    extra = {"tools": plan.template_tools()} if fmt == "hermes" and plan is not None and plan.offered else {}
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, **extra)
    ids = eng.model.tokenize(text, add_special=True, parse_special=True)
    return ids, eng.constraint(spec), (plan if plan is not None and plan.lark is not None else None)


def _head(model_name: str, obj: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-{uuid.uuid4()}", "object": obj, "created": int(time.time()), "model": model_name}


def _message(out: str, plan: tools.ToolPlan | None, reason: str) -> tuple[dict[str, Any], str]:
    content, calls = tools.parse_output(out, plan) if plan is not None else (out, [])
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
        reason = "tool_calls" if reason == "stop" else reason
    return msg, reason


def chat_completion(eng: Engine, model_name: str, ids: list[int], constraint: Any, plan: tools.ToolPlan | None,
                    opts: GenOptions) -> dict[str, Any]:
    evs = list(eng.run(opts.request(ids, constraint)))
    check_final(evs[-1])
    msg, reason = _message("".join(e.text for e in evs), plan, evs[-1].finish_reason)
    choice = {"index": 0, "message": msg, "logprobs": None, "finish_reason": reason}
    return {**_head(model_name, "chat.completion"), "choices": [choice], "usage": usage(evs[-1])}


def chat_chunks(eng: Engine, model_name: str, ids: list[int], constraint: Any, plan: tools.ToolPlan | None,
                opts: GenOptions) -> Iterator[dict[str, Any]]:
    """A role delta, a content delta per piece, a last chunk with an empty delta and the
    finish_reason.  When the answer may be a tool call, it is held to its end and sent as
    one tool_calls delta (or one content delta when it was not a call)."""
    h = _head(model_name, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        return {**h, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]}

    yield chunk({"role": "assistant"})
    held: list[str] = []
    for ev in eng.run(opts.request(ids, constraint)):
        if not ev.final:
            if plan is not None:
                held.append(ev.text)
            elif ev.text:
                yield chunk({"content": ev.text})
            continue
        check_final(ev)
        reason = ev.finish_reason
        if plan is not None:
            msg, reason = _message("".join(held) + ev.text, plan, reason)
            if msg.get("tool_calls"):
                yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(msg["tool_calls"])]})
            elif msg["content"]:
                yield chunk({"content": msg["content"]})
        elif ev.text:
            yield chunk({"content": ev.text})
        yield chunk({}, reason)
