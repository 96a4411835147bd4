"""OpenAI-compatible routes: /v1/models, /v1/completions, /v1/chat/completions (SSE streaming
ending in `data: [DONE]`, usage, logprobs)."""
from __future__ import annotations

import asyncio
import math
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..chat.message import MessageDelta
from .api_error import APIError, error_body, error_response, final_error
from .bridge import Pending, ServerState
from .chat_prep import ChatPrep, openai_calls, prepare_chat, reasoning_gate
from .choices import check_n, choice_sampling, interleave, summed_usage
from .constraints import compile_constraint, request_spec
from .handoff import request_logit_bias, submit, tokenize_prompt
from .request import Event, Request as GenRequest, Usage
from .schemas import BUILD_INFO, ChatCompletionRequest, ChatCompletionResponse, CompletionRequest, CompletionResponse, ok_response
from .sse import EventStream, sse
from .verbose import verbose_field, wants_verbose

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
    data = [{"id": state.alias, "aliases": list(state.aliases), "tags": list(state.tags), "object": "model",
             "created": state.t_created, "owned_by": "llamapy"}]
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
    check_n(body.n, len(state.scheduler.slots))
    spec = request_spec(body.grammar, body.json_schema)
    sampling = body.sampling(n_probs)
    ps = [submit(state, GenRequest(ids, max_tokens=-1 if body.max_tokens is None else body.max_tokens, sampling=choice_sampling(sampling, j), stop=body.stop_list(), n_probs=n_probs, ignore_eos=body.ignore_eos, logit_bias=request_logit_bias(state, body.logit_bias), **body.slot_params(), spec=body.spec_overrides(), constraint=await compile_constraint(state, spec), **body.telemetry()))
          for j in range(body.n)]  # one constraint per choice: a grammar's matcher follows its own sequence
    cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    head = {"id": cid, "object": "text_completion", "created": created, "model": state.alias, "system_fingerprint": BUILD_INFO}
    if body.stream:
        return EventStream(_stream(state, ps, head, chat=False, usage_chunk=_include_usage(body)), _closer(ps))
    results = await _collect_all(ps, request)
    if isinstance(results, JSONResponse):
        return results
    prefix = body.prompt if body.echo and isinstance(body.prompt, str) else ""
    choices = [{"index": i, "text": prefix + text, "logprobs": _cmpl_logprobs(state, evs), **_finish(evs[-1])}
               for i, (text, evs) in enumerate(results)]
    text, evs = results[0]
    out = {**head, "choices": choices, "usage": _usage(summed_usage([e[-1].usage for _, e in results])), "timings": evs[-1].timings}
    if wants_verbose(state, body):
        prompt = body.prompt if isinstance(body.prompt, str) else state.model.detokenize(ids)
        out["__verbose"] = verbose_field(state, prompt, text, ids, evs)
    return out


def _closer(ps: list[Pending]) -> Any:
    def close() -> None:
        for p in ps:
            p.close()
    return close


async def _collect_all(ps: list[Pending], request: Request) -> list[tuple[str, list[Event]]] | JSONResponse:
    """Every choice's text and events; a 499 when the client left, the first error raised."""
    try:
        results = await asyncio.gather(*(p.collect(request.receive) for p in ps))
    finally:
        _closer(ps)()
    for _, evs in results:
        if not evs or not evs[-1].final:
            return error_response(499, "client closed the request")
        if (err := final_error(evs[-1])) is not None:
            raise err
    return list(results)


@router.post("/apply-template")
async def apply_template_route(body: ChatCompletionRequest, request: Request) -> dict[str, str]:
    """llama-server's /apply-template: the prompt /v1/chat/completions would generate from."""
    return {"prompt": prepare_chat(_state(request), body).prompt}


@router.post("/v1/chat/completions/input_tokens")
@router.post("/chat/completions/input_tokens")
async def chat_input_tokens(body: ChatCompletionRequest, request: Request) -> dict[str, int]:
    """llama-server's count of the prompt tokens a chat request would have, generating nothing."""
    state = _state(request)
    return {"input_tokens": len(state.model.tokenize(prepare_chat(state, body).prompt, add_special=True, parse_special=True))}


@router.post("/v1/chat/completions", responses=ok_response(ChatCompletionResponse, stream=True))
@router.post("/chat/completions", responses=ok_response(ChatCompletionResponse, stream=True))
async def chat_completions(body: ChatCompletionRequest, request: Request):
    state = _state(request)
    body = state.defaults.apply(body)
    prep = prepare_chat(state, body)
    plan, text = prep.plan, prep.prompt
    ids = state.model.tokenize(text, add_special=True, parse_special=True)
    n_probs = body.n_probs()
    spec = request_spec(body.grammar, body.json_schema, body.response_format, plan)
    check_n(body.n, len(state.scheduler.slots))
    sampling = body.sampling(n_probs)
    # one constraint per choice: a grammar's matcher advances with its own sequence's tokens
    constraints = [reasoning_gate(state, prep, body, await compile_constraint(state, spec)) for _ in range(body.n)]
    ps = [submit(state, GenRequest(ids, max_tokens=body.n_predict(), sampling=choice_sampling(sampling, j), stop=body.stop_list(), n_probs=n_probs, ignore_eos=body.ignore_eos, logit_bias=request_logit_bias(state, body.logit_bias), **body.slot_params(), spec=body.spec_overrides(), constraint=c, **body.telemetry()))
          for j, c in enumerate(constraints)]
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    head = {"id": cid, "object": "chat.completion", "created": created, "model": state.alias, "system_fingerprint": BUILD_INFO}
    if body.stream:
        return EventStream(_stream(state, ps, {**head, "object": "chat.completion.chunk"}, chat=True, prep=prep,
                                   usage_chunk=_include_usage(body)), _closer(ps))
    results = await _collect_all(ps, request)
    if isinstance(results, JSONResponse):
        return results
    choices = [_chat_choice(state, prep, out, evs, i) for i, (out, evs) in enumerate(results)]
    out, evs = results[0]
    res = {**head, "choices": choices, "usage": _usage(summed_usage([e[-1].usage for _, e in results])), "timings": evs[-1].timings}
    if wants_verbose(state, body):
        res["__verbose"] = verbose_field(state, text, out, ids, evs)
    return JSONResponse(res)


def _chat_choice(state: ServerState, prep: ChatPrep, out: str, evs: list[Event], index: int) -> dict[str, Any]:
    """One choice of a chat completion: the parsed message (content, reasoning, tool calls)."""
    msg = prep.parse(out)
    calls = openai_calls(msg.tool_calls)
    message: dict[str, Any] = {"role": "assistant", "content": msg.content if msg.content or not calls else None}
    if msg.reasoning_content:
        message["reasoning_content"] = msg.reasoning_content
    fin = _finish(evs[-1])
    if calls:
        message["tool_calls"] = calls
        fin["finish_reason"] = "tool_calls" if fin["finish_reason"] == "stop" else fin["finish_reason"]
    return {"index": index, "message": message, "logprobs": _chat_logprobs(state, evs), **fin}


def _include_usage(body: CompletionRequest | ChatCompletionRequest) -> bool:
    return bool(body.stream_options and body.stream_options.include_usage)


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


async def _stream(state: ServerState, ps: list[Pending], head: dict[str, Any], chat: bool,
                  prep: ChatPrep | None = None, usage_chunk: bool = False) -> AsyncIterator[str]:
    """SSE: every choice's chunks (_choice_chunks) as they come, interleaved, then with
    stream_options.include_usage (usage_chunk) OpenAI's chunk with no choices, the usage (the
    choices' summed) and llama-server's timings, then [DONE].  An abort/error ends the stream
    with an error event."""
    finals: list[Event | None] = [None] * len(ps)
    async for i, item in interleave([_choice_chunks(state, p, head, chat, prep, j) for j, p in enumerate(ps)]):
        if isinstance(item, Event):
            if (err := final_error(item)) is not None:
                yield sse(error_body(err.status, err.message))
                yield "data: [DONE]\n\n"
                return
            finals[i] = item
        else:
            yield sse(item)
    if usage_chunk and finals[0] is not None:
        yield sse({**head, "choices": [], "usage": _usage(summed_usage([f.usage for f in finals if f is not None])),
                   "timings": finals[0].timings})
    yield "data: [DONE]\n\n"


async def _choice_chunks(state: ServerState, p: Pending, head: dict[str, Any], chat: bool,
                         prep: ChatPrep | None, index: int) -> AsyncIterator[dict[str, Any] | Event]:
    """One choice's chunks: a role delta first (chat), then deltas, a final chunk with
    finish_reason, its usage and timings; then its final Event (the caller's: the usage, an
    error).  Chat: the output so far is parsed as a message (chat/message.py) after each
    piece, and what grew is sent, as llama-server does: delta.reasoning_content,
    delta.content (text that may start a call marker is held), and the tool_calls once the
    output is complete."""
    def chunk(text: str | None, finish: str | None, ev: Event | None = None, role: bool = False,
              delta: dict[str, Any] | None = None) -> dict[str, Any]:
        if chat:
            if delta is None:
                delta = {"role": "assistant", "content": None} if role else ({"content": text} if text else {})
            c: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish}
            if ev is not None and ev.probs is not None:
                c["logprobs"] = _chat_logprobs(state, [ev])
        else:
            c = {"index": index, "text": text or "", "finish_reason": finish}
            if ev is not None and ev.probs is not None:
                c["logprobs"] = _cmpl_logprobs(state, [ev])
        return {**head, "choices": [c]}

    def telemetry(c: dict[str, Any], ev: Event) -> dict[str, Any]:  # timings_per_token, return_progress
        if ev.timings is not None:
            c["timings"] = ev.timings
        if ev.progress is not None:
            c["prompt_progress"] = ev.progress
        return c

    if chat and not p.req.return_progress:  # with return_progress the progress chunks carry the role (llama-server)
        yield chunk(None, None, role=True)
    out, delta = "", MessageDelta()

    def grown(final: bool) -> dict[str, Any]:
        msg = prep.parse(out, partial=not final)
        d: dict[str, Any] = dict(delta.grown(msg))
        if final and msg.tool_calls:
            d["tool_calls"] = _call_deltas(openai_calls(msg.tool_calls))
        return d
    async for ev in p.events():
        if not ev.final:
            if ev.progress is not None:  # llama-server's progress chunk: chat, the role delta; else empty text
                yield telemetry(chunk(None, None, role=True) if chat else chunk("", None), ev)
                continue
            if not chat:
                if ev.text or ev.probs is not None:
                    yield telemetry(chunk(ev.text, None, ev), ev)
                continue
            out += ev.text
            d = grown(False)
            if d or ev.probs is not None:
                yield telemetry(chunk(None, None, ev, delta=d), ev)
            continue
        if final_error(ev) is None:
            fin = _finish(ev)
            if chat:
                out += ev.text
                d = grown(True)
                if d:
                    yield chunk(None, None, delta=d)
                if "tool_calls" in d:
                    fin["finish_reason"] = "tool_calls" if fin["finish_reason"] == "stop" else fin["finish_reason"]
            elif ev.text:
                yield chunk(ev.text, None)
            last = chunk(None, fin["finish_reason"])
            last["choices"][0].update(fin)
            yield {**last, "usage": _usage(ev.usage), "timings": ev.timings}
        yield ev
        return
