"""create_chat_completion on the server's chat path (chat/ and server/chat_prep.py): the same
template rendering as /apply-template, the template's tool-call syntax and its grammar, the
reasoning format and budget (thinking to reasoning_content), parallel_tool_calls from the
template's caps; the answer as llama-cpp-python's chat.completion dict or its
chat.completion.chunk stream."""
from __future__ import annotations

import time
import uuid
from typing import Any, Iterator

from pydantic import ValidationError

from ..chat.apply import ChatOptions
from ..chat.message import MessageDelta
from ..server.api_error import APIError
from ..server.chat_prep import ChatEnv, ChatPrep, openai_calls, prepare_chat, reasoning_gate
from ..server.constraints import request_spec
from ..server.schemas import ChatCompletionRequest
from .completion import GenOptions, check_final, usage
from .engine import Engine

# create_chat_completion's keyword arguments that go to the chat request as they are
CHAT_FIELDS = ("chat_template_kwargs", "reasoning_format", "reasoning_effort", "parallel_tool_calls",
               "reasoning_budget_tokens", "reasoning_budget_message", "add_generation_prompt")


def prepare(eng: Engine, messages: list[dict[str, Any]], tool_list: list[dict[str, Any]] | None, tool_choice: Any,
            response_format: dict[str, Any] | None, grammar: str | None, opts: ChatOptions | None = None,
            **extra: Any) -> tuple[list[int], Any, ChatPrep]:
    """(prompt ids, constraint, the chat's prep) as the server's /v1/chat/completions builds
    them; ValueError for what the server answers with a 400."""
    env = ChatEnv(opts or ChatOptions(), eng.model)
    try:
        body = ChatCompletionRequest.model_validate({"messages": messages, "tools": tool_list, "tool_choice": tool_choice,
                                                     "response_format": response_format, "grammar": grammar,
                                                     **{k: v for k, v in extra.items() if v is not None}})
        prep = prepare_chat(env, body)
        spec = request_spec(grammar, None, response_format, prep.plan)
    except APIError as e:
        raise ValueError(e.message) from None
    except ValidationError as e:
        raise ValueError(f"create_chat_completion: {e.errors()[0].get('loc')}: {e.errors()[0].get('msg')}") from None
    constraint = reasoning_gate(env, prep, body, eng.constraint(spec))
    ids = eng.model.tokenize(prep.prompt, add_special=True, parse_special=True)
    return ids, constraint, prep


def _head(model_name: str, obj: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-{uuid.uuid4()}", "object": obj, "created": int(time.time()), "model": model_name}


def _message(out: str, prep: ChatPrep, reason: str) -> tuple[dict[str, Any], str]:
    msg = prep.parse(out)
    calls = openai_calls(msg.tool_calls)
    m: dict[str, Any] = {"role": "assistant", "content": msg.content if msg.content or not calls else None}
    if msg.reasoning_content:
        m["reasoning_content"] = msg.reasoning_content
    if calls:
        m["tool_calls"] = calls
        reason = "tool_calls" if reason == "stop" else reason
    return m, reason


def chat_completion(eng: Engine, model_name: str, ids: list[int], constraint: Any, prep: ChatPrep,
                    opts: GenOptions) -> dict[str, Any]:
    evs = list(eng.run(opts.request(ids, constraint)))
    check_final(evs[-1])
    msg, reason = _message("".join(e.text for e in evs), prep, evs[-1].finish_reason)
    choice = {"index": 0, "message": msg, "logprobs": None, "finish_reason": reason}
    return {**_head(model_name, "chat.completion"), "choices": [choice], "usage": usage(evs[-1])}


def chat_chunks(eng: Engine, model_name: str, ids: list[int], constraint: Any, prep: ChatPrep,
                opts: GenOptions) -> Iterator[dict[str, Any]]:
    """A role delta, then what grew of reasoning_content and content after each piece (the
    output parsed as a partial message, as the server streams: text that may begin a call
    marker is held), the calls once complete, a last chunk with an empty delta and the
    finish_reason."""
    h = _head(model_name, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        return {**h, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]}

    yield chunk({"role": "assistant"})
    out, delta = "", MessageDelta()

    def grown(final: bool) -> dict[str, Any]:
        msg = prep.parse(out, partial=not final)
        d: dict[str, Any] = dict(delta.grown(msg))
        if final and msg.tool_calls:
            d["tool_calls"] = [{"index": i, **c} for i, c in enumerate(openai_calls(msg.tool_calls))]
        return d

    for ev in eng.run(opts.request(ids, constraint)):
        out += ev.text
        if not ev.final:
            if d := grown(False):
                yield chunk(d)
            continue
        check_final(ev)
        reason = ev.finish_reason
        if d := grown(True):
            yield chunk(d)
        if "tool_calls" in d:
            reason = "tool_calls" if reason == "stop" else reason
        yield chunk({}, reason)
