"""Anthropic Messages API: POST /v1/messages (a message, or its stream of Anthropic's events:
message_start, content_block_start / _delta / _stop per block, message_delta, message_stop)
and POST /v1/messages/count_tokens, over the OpenAI chat path (the same template, tool plan
and output parsing: server/chat_prep.py), as llama-server serves them."""
from __future__ import annotations

import json
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from ..chat.message import MessageDelta, ParsedMessage
from .anthropic_convert import MessagesRequest, anthropic_error_body, anthropic_error_response, to_openai
from .api_error import APIError, final_error, json_body
from .bridge import Pending, ServerState
from .chat_prep import ChatPrep, openai_calls, prepare_chat, reasoning_gate
from .constraints import compile_constraint, request_spec
from .handoff import submit
from .request import Event, Request as GenRequest, Usage
from .schemas import ChatCompletionRequest
from .sse import EventStream, sse_event

router = APIRouter()


async def _parse(state: ServerState, request: Request) -> tuple[MessagesRequest, ChatCompletionRequest, ChatPrep, list[int]]:
    """The request, its OpenAI form, its prompt and the prompt's tokens; 400 for what is wrong."""
    if not state.ready:
        raise APIError(503, "Loading model")
    raw = await json_body(request)
    try:
        body = MessagesRequest.model_validate(raw)
        oai = to_openai(body)
        n_messages = len(oai["messages"])  # llama-server accepts none; the OpenAI schema wants one
        chat = ChatCompletionRequest.model_validate({**oai, "messages": oai["messages"] or [{"role": "user", "content": ""}]})
    except ValidationError as e:
        raise APIError(400, "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'body'}: {err['msg']}" for err in e.errors())) from None
    if n_messages == 0:
        chat.messages = []
    chat = state.defaults.apply(chat)
    prep = prepare_chat(state, chat)
    return body, chat, prep, state.model.tokenize(prep.prompt, add_special=True, parse_special=True)


@router.post("/v1/messages/count_tokens", include_in_schema=False)  # errors in Anthropic's shape, not the OpenAPI document's
async def count_tokens(request: Request) -> dict[str, int]:
    """The prompt's token count (max_tokens not needed)."""
    *_, ids = await _parse(request.app.state.llama, request)
    return {"input_tokens": len(ids)}


@router.post("/v1/messages", include_in_schema=False)
async def messages(request: Request):
    state: ServerState = request.app.state.llama
    body, chat, prep, ids = await _parse(state, request)
    constraint = reasoning_gate(state, prep, chat, await compile_constraint(state, request_spec(None, None, None, prep.plan)))
    req = GenRequest(ids, max_tokens=chat.n_predict(), sampling=chat.sampling(), stop=chat.stop_list(), spec=chat.spec_overrides(),
                     constraint=constraint)
    p = submit(state, req)
    head = {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": body.model or state.alias}
    if body.stream:
        return EventStream(_stream(p, prep, head, len(ids)), p.close)
    out, evs = await p.collect(request.receive)
    if not evs or not evs[-1].final:
        return anthropic_error_response(499, "client closed the request")
    if (err := final_error(evs[-1])) is not None:
        raise err
    msg = prep.parse(out)
    calls = openai_calls(msg.tool_calls)
    content = _blocks(msg, calls)
    return JSONResponse({**head, "content": content, **_stop(evs[-1], bool(calls)), "usage": _usage(evs[-1].usage)})


def _usage(u: Usage | None) -> dict[str, int]:
    """llama-server's: input_tokens not read from the prompt cache, cache_read_input_tokens."""
    u = u or Usage()
    return {"cache_read_input_tokens": u.prompt_tokens_cached, "input_tokens": u.prompt_tokens - u.prompt_tokens_cached,
            "output_tokens": u.completion_tokens}


def _stop(ev: Event, called: bool) -> dict[str, Any]:
    """stop_reason and stop_sequence: a call -> tool_use, a stop string -> stop_sequence, the token
    limit or the context's end -> max_tokens, else (end of generation) end_turn."""
    if ev.finish_reason == "length":
        reason = "max_tokens"
    elif called:
        reason = "tool_use"
    elif ev.stopping_word:
        reason = "stop_sequence"
    else:
        reason = "end_turn"
    return {"stop_reason": reason, "stop_sequence": ev.stopping_word or None}


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return {}


def _blocks(msg: ParsedMessage, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """thinking (with an empty signature: nothing signs a local model's thinking), text, then
    one tool_use per call."""
    out: list[dict[str, Any]] = []
    if msg.reasoning_content:
        out.append({"type": "thinking", "thinking": msg.reasoning_content, "signature": ""})
    if msg.content:
        out.append({"type": "text", "text": msg.content})
    out += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": _input(c["function"]["arguments"])}
            for c in calls]
    return out


def event(kind: str, data: dict[str, Any]) -> str:
    """One Anthropic server-sent event: its `event:` line, then its data."""
    return sse_event(kind, {"type": kind, **data})


class _Blocks:
    """The stream's content blocks: one open at a time, indices counting from 0; a new kind
    closes the open one (a thinking block with its signature_delta first)."""

    def __init__(self) -> None:
        self.index, self.kind = -1, ""

    def close(self) -> list[str]:
        if not self.kind:
            return []
        out = [event("content_block_delta", {"index": self.index, "delta": {"type": "signature_delta", "signature": ""}})] \
            if self.kind == "thinking" else []
        self.kind = ""
        return out + [event("content_block_stop", {"index": self.index})]

    def open(self, kind: str, block: dict[str, Any]) -> list[str]:
        out = self.close()
        self.index, self.kind = self.index + 1, kind
        return out + [event("content_block_start", {"index": self.index, "content_block": block})]

    def text(self, kind: str, piece: str) -> list[str]:
        """A thinking or text piece, in a block of its kind."""
        out = self.open(kind, {"type": kind, kind: ""}) if self.kind != kind else []
        delta = {"type": "thinking_delta", "thinking": piece} if kind == "thinking" else {"type": "text_delta", "text": piece}
        return out + [event("content_block_delta", {"index": self.index, "delta": delta})]


async def _stream(p: Pending, prep: ChatPrep, head: dict[str, Any], n_prompt: int) -> AsyncIterator[str]:
    """The message's events.  The output so far is parsed after each piece (as the OpenAI
    stream does) and what grew goes out as thinking / text deltas; the tool calls, once the
    output is complete, as tool_use blocks with their whole input in one input_json_delta."""
    yield event("message_start", {"message": {**head, "content": [], "stop_reason": None, "stop_sequence": None,
                                              "usage": {"input_tokens": n_prompt, "output_tokens": 0}}})
    blocks, out, delta = _Blocks(), "", MessageDelta()
    kinds = {"reasoning_content": "thinking", "content": "text"}

    def grown(msg: ParsedMessage) -> list[str]:
        return [e for key, piece in delta.grown(msg) for e in blocks.text(kinds[key], piece)]

    async for ev in p.events():
        out += ev.text
        if not ev.final:
            for e in grown(prep.parse(out, partial=True)):
                yield e
            continue
        if (err := final_error(ev)) is not None:
            yield event("error", anthropic_error_body(err.status, err.message))
            return
        msg = prep.parse(out)
        for e in grown(msg):
            yield e
        calls = openai_calls(msg.tool_calls)
        for c in calls:
            for e in blocks.open("tool_use", {"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": {}}):
                yield e
            yield event("content_block_delta", {"index": blocks.index,
                                                "delta": {"type": "input_json_delta", "partial_json": c["function"]["arguments"]}})
        for e in blocks.close():
            yield e
        yield event("message_delta", {"delta": _stop(ev, bool(calls)), "usage": _usage(ev.usage)})
        yield event("message_stop", {})
        return
