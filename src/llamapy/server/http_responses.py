"""OpenAI Responses API: POST /v1/responses (and /responses) answers a response object, or
its stream of response.* events in the order OpenAI sends them (response.created,
response.in_progress, per output item output_item.added ... output_item.done with its
content_part / output_text / reasoning_text / function_call_arguments events, then
response.completed), each with sequence_number, output_index and content_index as the `openai`
package's responses.stream() accumulates them; POST /v1/responses/input_tokens counts the
prompt.  Over the OpenAI chat path (server/chat_prep.py), as llama-server serves it."""
from __future__ import annotations

import time
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from ..chat.message import MessageDelta, ParsedMessage
from .api_error import APIError, error_body, error_response, final_error, json_body
from .bridge import Pending, ServerState
from .chat_prep import ChatPrep, openai_calls, prepare_chat, reasoning_gate
from .constraints import compile_constraint, request_spec
from .handoff import submit
from .request import Request as GenRequest, Usage
from .responses_convert import to_chat
from .schemas import ChatCompletionRequest
from .sse import EventStream, sse_event

router = APIRouter()


async def _parse(state: ServerState, request: Request) -> tuple[dict[str, Any], ChatCompletionRequest, ChatPrep, list[int]]:
    """The body, its chat form, its prompt and the prompt's tokens; 400 for what is wrong."""
    if not state.ready:
        raise APIError(503, "Loading model")
    raw = await json_body(request, dict, "body: expected a JSON object")
    oai = to_chat(raw)
    try:  # an empty input list is a conversation of none (the chat schema wants one message)
        chat = ChatCompletionRequest.model_validate({**oai, "messages": oai["messages"] or [{"role": "user", "content": ""}]})
    except ValidationError as e:
        raise APIError(400, "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'body'}: {err['msg']}" for err in e.errors())) from None
    if not oai["messages"]:
        chat.messages = []
    chat = state.defaults.apply(chat)
    prep = prepare_chat(state, chat)
    return raw, chat, prep, state.model.tokenize(prep.prompt, add_special=True, parse_special=True)


@router.post("/v1/responses/input_tokens", include_in_schema=False)
@router.post("/responses/input_tokens", include_in_schema=False)
async def input_tokens(request: Request) -> dict[str, Any]:
    *_, ids = await _parse(request.app.state.llama, request)
    return {"object": "response.input_tokens", "input_tokens": len(ids)}


@router.post("/v1/responses", include_in_schema=False)
@router.post("/responses", include_in_schema=False)
async def responses(request: Request):
    state: ServerState = request.app.state.llama
    raw, chat, prep, ids = await _parse(state, request)
    constraint = reasoning_gate(state, prep, chat, await compile_constraint(state, request_spec(chat.grammar, chat.json_schema, chat.response_format, prep.plan)))
    req = GenRequest(ids, max_tokens=chat.n_predict(), sampling=chat.sampling(), stop=chat.stop_list(), ignore_eos=chat.ignore_eos, **chat.slot_params(),
                     spec=chat.spec_overrides(), constraint=constraint, **chat.telemetry())
    p = submit(state, req)
    head = _head(raw, chat, state)
    if chat.stream:
        return EventStream(_stream(p, prep, head), p.close)
    out, evs = await p.collect(request.receive)
    if not evs or not evs[-1].final:
        return error_response(499, "client closed the request")
    if (err := final_error(evs[-1])) is not None:
        raise err
    msg = prep.parse(out)
    items = _reasoning(msg.reasoning_content) + _message(msg, bool(msg.tool_calls)) + _calls(msg)
    return JSONResponse(_done(head, items, evs[-1].usage))


def _head(raw: dict[str, Any], chat: ChatCompletionRequest, state: ServerState) -> dict[str, Any]:
    """The response object's fields that do not depend on the output (OpenAI's echo of the request)."""
    return {"id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time()), "status": "in_progress",
            "model": chat.model or state.alias, "output": [], "error": None, "incomplete_details": None,
            "instructions": raw.get("instructions"), "max_output_tokens": raw.get("max_output_tokens"),
            "temperature": chat.temperature, "top_p": chat.top_p, "tools": raw.get("tools") or [],
            "tool_choice": raw.get("tool_choice") or "auto", "parallel_tool_calls": chat.parallel_tool_calls is not False,
            "metadata": raw.get("metadata") or {}, "text": raw.get("text") or {"format": {"type": "text"}}, "usage": None}


def _usage(u: Usage | None) -> dict[str, Any]:
    u = u or Usage()
    return {"input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens, "total_tokens": u.total_tokens,
            "input_tokens_details": {"cached_tokens": u.prompt_tokens_cached}, "output_tokens_details": {"reasoning_tokens": 0}}


def _done(head: dict[str, Any], items: list[dict[str, Any]], usage: Usage | None) -> dict[str, Any]:
    """The finished response.  status is "completed" also when max_output_tokens cut it, as
    llama-server answers (and as responses.stream() needs to finish)."""
    return {**head, "status": "completed", "completed_at": int(time.time()), "output": items, "usage": _usage(usage)}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(text: str, item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id or f"msg_{uuid.uuid4().hex}", "type": "message", "status": status, "role": "assistant",
            "content": [_text_part(text)] if status == "completed" else []}


def _reasoning_item(text: str, item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id or f"rs_{uuid.uuid4().hex}", "type": "reasoning", "summary": [], "encrypted_content": None,
            "status": status, "content": [{"type": "reasoning_text", "text": text}] if status == "completed" else []}


def _reasoning(text: str) -> list[dict[str, Any]]:
    return [_reasoning_item(text)] if text else []


def _message(msg: ParsedMessage, called: bool) -> list[dict[str, Any]]:
    """The message item: when there is text, or when there is nothing else (an empty answer)."""
    return [_message_item(msg.content)] if msg.content or not (called or msg.reasoning_content) else []


def _calls(msg: ParsedMessage) -> list[dict[str, Any]]:
    """One function_call item per parsed call (call_id: the call's id, as function_call_output refers to it)."""
    return [{"id": f"fc_{uuid.uuid4().hex}", "type": "function_call", "status": "completed", "call_id": c["id"],
             "name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in openai_calls(msg.tool_calls)]


class _Events:
    """The stream's events, numbered (sequence_number), and its output items: one text item
    (reasoning or message) open at a time; a new kind closes the open one."""

    def __init__(self, head: dict[str, Any]) -> None:
        self.head, self.seq, self.items = head, 0, []
        self.open_kind, self.open_id, self.text = "", "", ""

    def ev(self, kind: str, **data: Any) -> str:
        out = sse_event(kind, {"type": kind, "sequence_number": self.seq, **data})
        self.seq += 1
        return out

    @property
    def index(self) -> int:
        return len(self.items)

    def close(self) -> list[str]:
        if not self.open_kind:
            return []
        loc = {"item_id": self.open_id, "output_index": self.index, "content_index": 0}
        if self.open_kind == "message":
            item = _message_item(self.text, self.open_id)
            out = [self.ev("response.output_text.done", **loc, text=self.text, logprobs=[]),
                   self.ev("response.content_part.done", **loc, part=_text_part(self.text))]
        else:
            item = _reasoning_item(self.text, self.open_id)
            out = [self.ev("response.reasoning_text.done", **loc, text=self.text)]
        out.append(self.ev("response.output_item.done", output_index=self.index, item=item))
        self.items.append(item)
        self.open_kind, self.text = "", ""
        return out

    def piece(self, kind: str, text: str, extra: dict[str, Any]) -> list[str]:
        """A reasoning or message text piece, in an item of its kind; extra: more fields of
        its delta event (llama-server's timings with timings_per_token)."""
        out: list[str] = []
        if self.open_kind != kind:
            out += self.close()
            self.open_kind = kind
            if kind == "message":
                self.open_id = f"msg_{uuid.uuid4().hex}"
                out.append(self.ev("response.output_item.added", output_index=self.index,
                                   item=_message_item("", self.open_id, "in_progress")))
                out.append(self.ev("response.content_part.added", item_id=self.open_id, output_index=self.index,
                                   content_index=0, part=_text_part("")))
            else:
                self.open_id = f"rs_{uuid.uuid4().hex}"
                out.append(self.ev("response.output_item.added", output_index=self.index,
                                   item=_reasoning_item("", self.open_id, "in_progress")))
        self.text += text
        loc = {"item_id": self.open_id, "output_index": self.index, "content_index": 0}
        name = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        return out + [self.ev(name, **loc, delta=text, **({"logprobs": []} if kind == "message" else {}), **extra)]

    def call(self, item: dict[str, Any]) -> list[str]:
        """A whole function call: added, its arguments in one delta, done."""
        out = self.close()
        loc = {"item_id": item["id"], "output_index": self.index}
        out += [self.ev("response.output_item.added", output_index=self.index, item={**item, "status": "in_progress", "arguments": ""}),
                self.ev("response.function_call_arguments.delta", **loc, delta=item["arguments"]),
                self.ev("response.function_call_arguments.done", **loc, arguments=item["arguments"], name=item["name"]),
                self.ev("response.output_item.done", output_index=self.index, item=item)]
        self.items.append(item)
        return out


async def _stream(p: Pending, prep: ChatPrep, head: dict[str, Any]) -> AsyncIterator[str]:
    """The response's events.  The output so far is parsed after each piece (as the chat
    stream does) and what grew goes out as reasoning / text deltas; function calls, once the
    output is complete, each as a whole item."""
    es = _Events(head)
    yield es.ev("response.created", response=head)
    yield es.ev("response.in_progress", response=head)
    out, delta = "", MessageDelta()
    kinds = {"reasoning_content": "reasoning", "content": "message"}

    def grown(msg: ParsedMessage, extra: dict[str, Any]) -> list[str]:
        return [e for key, piece in delta.grown(msg) for e in es.piece(kinds[key], piece, extra)]

    async for ev in p.events():
        if ev.progress is not None:  # return_progress: llama-server's prompt_progress after a prompt batch
            yield es.ev("response.in_progress", response=head, prompt_progress=ev.progress)
            continue
        out += ev.text
        if not ev.final:
            for e in grown(prep.parse(out, partial=True), {"timings": ev.timings} if ev.timings else {}):
                yield e
            continue
        if (err := final_error(ev)) is not None:  # the openai package raises an APIError on an "error" key
            yield es.ev("error", code=str(err.status), message=err.message, param=None, **error_body(err.status, err.message))
            return
        msg = prep.parse(out)
        evs = grown(msg, {})
        if not evs and not es.items and not es.open_kind and not msg.tool_calls:
            evs = es.piece("message", "", {})  # an empty answer is still a message
        for e in evs:
            yield e
        for e in es.close():
            yield e
        for item in _calls(msg):
            for e in es.call(item):
                yield e
        yield es.ev("response.completed", response=_done(head, es.items, ev.usage), timings=ev.timings)
        return
