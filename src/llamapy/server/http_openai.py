"""OpenAI-compatible routes: /v1/models, /v1/completions, /v1/chat/completions (SSE streaming
ending in `data: [DONE]`, usage, logprobs)."""
from __future__ import annotations

import math
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from . import tools
from .api_error import APIError, error_body, error_response, final_error
from .bridge import Pending, ServerState
from .constraints import compile_constraint, request_spec
from .handoff import submit, tokenize_prompt
from .request import Event, Request as GenRequest, Usage
from .schemas import BUILD_INFO, ChatCompletionRequest, ChatCompletionResponse, CompletionRequest, CompletionResponse, ok_response
from .sse import EventStream, sse

router = APIRouter()


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.llama
    if not state.ready:
        raise APIError(503, "Loading model")
    return state


def _usage(u: Usage | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens,
            "prompt_tokens_details": {"cached_tokens": u.prompt_tokens_cached}}


def _piece(state: ServerState, t: int) -> str:
    return state.model.tokenizer.token_to_piece(t).decode("utf-8", errors="replace")


def _lp(p: float) -> float:
    return math.log(p) if p > 0 else -9999.0


def _chat_logprobs(state: ServerState, evs: list[Event]) -> dict[str, Any] | None:
    toks = [e for e in evs if e.token >= 0 and e.probs is not None]
    if not toks:
        return None
    content = []
    for e in toks:
        tops = [{"token": _piece(state, t), "logprob": _lp(p), "bytes": list(_piece(state, t).encode())} for t, p in e.probs]
        content.append({"token": _piece(state, e.token), "logprob": _lp(e.prob), "bytes": list(_piece(state, e.token).encode()), "top_logprobs": tops})
    return {"content": content}


def _cmpl_logprobs(state: ServerState, evs: list[Event]) -> dict[str, Any] | None:
    toks = [e for e in evs if e.token >= 0 and e.probs is not None]
    if not toks:
        return None
    return {"tokens": [_piece(state, e.token) for e in toks], "token_logprobs": [_lp(e.prob) for e in toks],
            "top_logprobs": [{_piece(state, t): _lp(p) for t, p in e.probs} for e in toks], "text_offset": []}


@router.get("/v1/models")
@router.get("/models")
async def models(request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.llama
    data = [{"id": state.alias, "object": "model", "created": state.t_created, "owned_by": "llamapy"}]
    if state.ready:
        hp = state.model.hparams
        data[0]["meta"] = {"n_vocab": hp.n_vocab, "n_ctx_train": hp.n_ctx_train, "n_embd": hp.n_embd, "size": state.model.n_bytes_file}
    return {"object": "list", "data": data}


@router.post("/v1/completions", responses=ok_response(CompletionResponse, stream=True))
async def completions(body: CompletionRequest, request: Request):
    state = _state(request)
    body = state.defaults.apply(body)
    ids = tokenize_prompt(state, body.prompt)
    n_probs = body.logprobs or 0
    constraint = await compile_constraint(state, request_spec(body.grammar, body.json_schema))
    req = GenRequest(ids, max_tokens=-1 if body.max_tokens is None else body.max_tokens, sampling=body.sampling(n_probs), stop=body.stop_list(), n_probs=n_probs, ignore_eos=body.ignore_eos, spec=body.spec_overrides(), constraint=constraint)
    p = submit(state, req)
    cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    head = {"id": cid, "object": "text_completion", "created": created, "model": state.alias, "system_fingerprint": BUILD_INFO}
    if body.stream:
        return EventStream(_stream(state, p, head, chat=False), p.close)
    text, evs = await p.collect(request.is_disconnected)
    if not evs or not evs[-1].final:
        return error_response(499, "client closed the request")
    if (err := final_error(evs[-1])) is not None:
        raise err
    prefix = body.prompt if body.echo and isinstance(body.prompt, str) else ""
    choice = {"index": 0, "text": prefix + text, "logprobs": _cmpl_logprobs(state, evs), **_finish(evs[-1])}
    return {**head, "choices": [choice], "usage": _usage(evs[-1].usage), "timings": evs[-1].timings}


@router.post("/v1/chat/completions", responses=ok_response(ChatCompletionResponse, stream=True))
@router.post("/chat/completions", responses=ok_response(ChatCompletionResponse, stream=True))
async def chat_completions(body: ChatCompletionRequest, request: Request):
    state = _state(request)
    body = state.defaults.apply(body)
    tmpl = state.model.tokenizer.chat
    fmt = tools.template_format(tmpl.source)
    try:
        plan = tools.plan(body.tools, body.tool_choice, body.parallel_tool_calls, fmt)
        messages = tools.render_messages([m.as_dict() for m in body.messages], plan, fmt)
    except tools.ToolError as e:
        raise APIError(400, str(e)) from None
    extra = {"tools": plan.template_tools()} if fmt == "hermes" and plan is not None and plan.offered else {}
    try:
        text = state.model.tokenizer.apply_chat_template(messages, add_generation_prompt=True, **extra)
    except Exception as e:  # a template that rejects the conversation (e.g. roles out of order)
        raise APIError(400, f"messages: the chat template failed: {e}") from None
    ids = state.model.tokenize(text, add_special=True, parse_special=True)
    n_probs = body.n_probs()
    spec = request_spec(body.grammar, body.json_schema, body.response_format, plan)
    constraint = await compile_constraint(state, spec)
    req = GenRequest(ids, max_tokens=body.n_predict(), sampling=body.sampling(n_probs), stop=body.stop_list(), n_probs=n_probs, ignore_eos=body.ignore_eos, spec=body.spec_overrides(), constraint=constraint)
    p = submit(state, req)
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    head = {"id": cid, "object": "chat.completion", "created": created, "model": state.alias, "system_fingerprint": BUILD_INFO}
    calls_possible = plan is not None and plan.lark is not None
    if body.stream:
        return EventStream(_stream(state, p, {**head, "object": "chat.completion.chunk"}, chat=True, plan=plan if calls_possible else None), p.close)
    out, evs = await p.collect(request.is_disconnected)
    if not evs or not evs[-1].final:
        return error_response(499, "client closed the request")
    if (err := final_error(evs[-1])) is not None:
        raise err
    content, calls = tools.parse_output(out, plan) if calls_possible else (out, [])
    message: dict[str, Any] = {"role": "assistant", "content": content}
    fin = _finish(evs[-1])
    if calls:
        message["tool_calls"] = calls
        fin["finish_reason"] = "tool_calls" if fin["finish_reason"] == "stop" else fin["finish_reason"]
    choice = {"index": 0, "message": message, "logprobs": _chat_logprobs(state, evs), **fin}
    return JSONResponse({**head, "choices": [choice], "usage": _usage(evs[-1].usage), "timings": evs[-1].timings})


def _finish(ev: Event) -> dict[str, Any]:
    """The choice's finish_reason, the grammar's message when the grammar ended it, and
    finish_details when something other than the request's own limits ended it."""
    out: dict[str, Any] = {"finish_reason": ev.finish_reason}
    if ev.finish_reason == "grammar":
        out["grammar_error"] = ev.error
    if ev.error:  # why it ended there: the grammar's message, a full KV cache's numbers
        out["finish_details"] = ev.error
    return out


def _call_deltas(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI's streamed tool_calls deltas: per call its index, id, type and name with the
    whole arguments string."""
    return [{"index": i, "id": c["id"], "type": "function", "function": c["function"]} for i, c in enumerate(calls)]


async def _stream(state: ServerState, p: Pending, head: dict[str, Any], chat: bool,
                  plan: tools.ToolPlan | None = None) -> AsyncIterator[str]:
    """SSE chunks: a role delta first (chat), one chunk per text piece, a final chunk with
    finish_reason and usage, then [DONE].  An abort/error ends with an error event.  With
    tools that may be called: an answer that starts as a call does is held until
    it is complete and then sent as tool_calls deltas; any other answer streams as text.
    (A call starts with "{" in the generic format, "<tool_call>" in hermes.)"""
    def chunk(text: str | None, finish: str | None, ev: Event | None = None, role: bool = False) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else ({"content": text} if text else {})
            c: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            if ev is not None and ev.probs is not None:
                c["logprobs"] = _chat_logprobs(state, [ev])
        else:
            c = {"index": 0, "text": text or "", "finish_reason": finish}
            if ev is not None and ev.probs is not None:
                c["logprobs"] = _cmpl_logprobs(state, [ev])
        return {**head, "choices": [c]}

    if chat:
        yield sse(chunk(None, None, role=True))
    held: str | None = "" if plan is not None else None  # text held while it may be a call
    async for ev in p.events():
        if not ev.final:
            if held is not None:
                held += ev.text
                pre = tools.call_prefix(plan)
                if held and not (held.startswith(pre) or pre.startswith(held)):  # plain text: stream from here on
                    yield sse(chunk(held, None, ev))
                    held = None
                continue
            if ev.text or ev.probs is not None:
                yield sse(chunk(ev.text, None, ev))
            continue
        if (err := final_error(ev)) is not None:
            yield sse(error_body(err.status, err.message))
        else:
            fin = _finish(ev)
            if held is not None:
                content, calls = tools.parse_output(held + ev.text, plan)
                if calls:
                    c = chunk(None, None)
                    c["choices"][0]["delta"] = {"tool_calls": _call_deltas(calls)}
                    yield sse(c)
                    fin["finish_reason"] = "tool_calls" if fin["finish_reason"] == "stop" else fin["finish_reason"]
                elif content:
                    yield sse(chunk(content, None))
            elif ev.text:
                yield sse(chunk(ev.text, None))
            last = chunk(None, fin["finish_reason"])
            last["choices"][0].update(fin)
            yield sse({**last, "usage": _usage(ev.usage), "timings": ev.timings})
        yield "data: [DONE]\n\n"
        return
