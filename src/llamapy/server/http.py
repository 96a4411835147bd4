"""The FastAPI app: errors in OpenAI's shape, the API key check, llama.cpp's native routes
(/health, /props, /slots, /metrics, /completion, /tokenize, /detokenize); the OpenAI routes
live in http_openai.py, the web UI's in webui_routes.py.  Nothing here touches torch: requests go to the scheduler thread."""
from __future__ import annotations

import asyncio
import hmac
import math
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..gguf.ftype import ftype_name
from .cors import Cors
from .header_case import HeaderCase
from .api_error import APIError, error_body, error_response, final_error, json_body
from .anthropic_convert import anthropic_error_response, is_anthropic_path
from .bridge import Pending, ServerState
from .constraints import compile_constraint, request_spec
from .handoff import request_logit_bias, submit
from .prompt_input import prompt_inputs
from .logit_bias import format_logit_bias, with_eog
from .http_anthropic import router as anthropic_router
from .http_responses import router as responses_router
from .http_slots import router as slots_router
from .http_lora import router as lora_router
from .http_embed import router as embed_router
from .http_openai import router as openai_router
from .http_proxy import router as proxy_router
from .tools_routes import router as tools_router
from .http_infill import infill_request
from .http_rerank import router as rerank_router
from .metrics import render_prometheus
from .request import Event, Request as GenRequest
from .schemas import (BUILD_INFO, ERROR_RESPONSES, DetokenizeRequest, DetokenizeResponse, NativeCompletionRequest,
                      NativeCompletionResponse, TokenizeRequest, TokenizeResponse, ok_response)
from .json_body import JsonBody
from .limits import BodyLimit
from .sse import EventStream, sse
from .webui_routes import is_webui_path, router as webui_router

OPEN_PATHS = ("/health", "/v1/health")


def create_app(state: ServerState) -> HeaderCase:
    app = FastAPI(title="llamapy server", docs_url=None, redoc_url=None, openapi_url="/openapi.json",
                  responses=ERROR_RESPONSES)
    app.state.llama = state

    def _error(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        """OpenAI's error shape, or Anthropic's on its routes (http_anthropic.py)."""
        make = anthropic_error_response if is_anthropic_path(request.url.path) else error_response
        return make(status, message, headers)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError) -> JSONResponse:
        if (e.type or e.extra) and not is_anthropic_path(request.url.path):
            return error_response(e.status, e.message, e.headers, e.type, e.extra)
        return _error(request, e.status, e.message, e.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        errs = e.errors()
        if any(err.get("type") == "json_invalid" for err in errs):
            return _error(request, 400, "malformed JSON in request body: " + "; ".join(str(err.get("ctx", {}).get("error", err["msg"])) for err in errs))
        parts = [f"{'.'.join(str(x) for x in err['loc'] if x != 'body') or 'body'}: {err['msg']}" for err in errs]
        return _error(request, 400, "; ".join(parts))  # llama-server's status for a bad field

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        msg = f"File Not Found: {request.method} {request.url.path}" if e.status_code == 404 else str(e.detail)
        return _error(request, e.status_code, msg)

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        keys = state.api_keys or ((state.api_key,) if state.api_key else ())
        if keys and request.url.path not in OPEN_PATHS and not (state.webui and is_webui_path(request.url.path)):
            got, x_key = request.headers.get("authorization", ""), request.headers.get("x-api-key", "")  # x-api-key: Anthropic's clients
            ok = any(hmac.compare_digest(got.encode(), f"Bearer {k}".encode()) or hmac.compare_digest(x_key.encode(), k.encode())
                     for k in keys)  # constant time per key
            if not ok:
                return _error(request, 401, "Invalid API Key" if got or x_key else "Missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
        if state.draining:
            return _error(request, 503, "server is shutting down")
        return await call_next(request)

    @app.get("/health")
    @app.get("/v1/health")
    async def health() -> JSONResponse:
        if not state.ready:
            return error_response(503, "Loading model")
        broken = state.ctx.health_error() if state.ctx is not None else None
        if broken:
            return error_response(503, broken)
        return JSONResponse({"status": "ok"})

    @app.get("/props")
    async def props() -> dict[str, Any]:
        _ready(state)
        c, vocab = state.ctx.cparams, state.model.tokenizer.vocab
        text = lambda t: "" if t is None else state.model.tokenizer.token_to_piece(t).decode("utf-8", errors="replace")  # noqa: E731
        return {
            "default_generation_settings": {"n_ctx": c.n_ctx_seq, "params": state.defaults.props({"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05})},
            "total_slots": c.n_seq_max, "n_ctx": c.n_ctx, "n_ctx_seq": c.n_ctx_seq, "kv_unified": c.kv_unified,
            "n_batch": c.n_batch, "n_ubatch": c.n_ubatch, "model_alias": state.alias, "model_path": str(state.model.path),
            "model_ftype": ftype_name(state.model.gguf.get("general.file_type")),
            "modalities": {"vision": False, "audio": False},
            "endpoint_slots": state.slots, "endpoint_props": state.props, "endpoint_metrics": state.metrics,
            "endpoint_engine_events": state.metrics or state.engine_events, "webui": state.webui,
            "cors_proxy_enabled": state.ui_mcp_proxy,
            "chat_template": state.model.tokenizer.chat.source, "chat_template_caps": state.model.tokenizer.chat.caps.to_json(), "bos_token": text(vocab.special.get("bos")),
            "eos_token": text(vocab.special.get("eos")), "build_info": BUILD_INFO, "is_sleeping": False,
        }

    @app.post("/props", include_in_schema=False)
    async def set_props() -> dict[str, Any]:
        """llama-server's: no property can be changed yet; with --props it answers success."""
        if not state.props:
            raise APIError(501, "This server does not support changing global properties. Start it with `--props`")
        return {"success": True}

    @app.get("/slots")
    async def slots() -> list[dict[str, Any]]:
        if not state.slots:
            raise APIError(501, "This server does not support slots endpoint. Start it with `--slots`")
        _ready(state)
        return state.scheduler.snapshot()[0]

    @app.get("/metrics", response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text"}})
    async def metrics() -> PlainTextResponse:
        if not state.metrics:
            raise APIError(501, "This server does not support metrics endpoint. Start it with `--metrics`")
        _ready(state)
        return PlainTextResponse(render_prometheus(state.scheduler.snapshot()[1]), media_type="text/plain; version=0.0.4",
                                 headers={"Process-Start-Time-Unix": str(state.t_created)})  # llama-server's header

    @app.post("/tokenize", responses=ok_response(TokenizeResponse))
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        _ready(state)
        ids = state.model.tokenize(body.content, add_special=body.add_special, parse_special=body.parse_special)
        if not body.with_pieces:
            return {"tokens": ids}
        tok = state.model.tokenizer
        return {"tokens": [{"id": i, "piece": tok.token_to_piece(i).decode("utf-8", errors="replace")} for i in ids]}

    @app.post("/detokenize", responses=ok_response(DetokenizeResponse))
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        _ready(state)
        bad = [t for t in body.tokens if t >= state.model.n_vocab]
        if bad:
            raise APIError(400, f"tokens: token id {bad[0]} out of range (n_vocab = {state.model.n_vocab})")
        return {"content": state.model.detokenize(body.tokens)}

    @app.post("/completion", responses=ok_response(NativeCompletionResponse, stream=True))
    @app.post("/completions", responses=ok_response(NativeCompletionResponse, stream=True))
    async def completion(body: NativeCompletionRequest, request: Request):
        return await native_completion(state, body, request)

    @app.post("/infill", include_in_schema=False)  # a free-form body (llama-server's checks); 501 without FIM tokens
    async def infill(request: Request):
        _ready(state)
        return await native_completion(state, infill_request(state, await json_body(request)), request)

    app.include_router(openai_router)
    app.include_router(anthropic_router)
    app.include_router(responses_router)
    app.include_router(slots_router)
    app.include_router(lora_router)
    app.include_router(embed_router)
    app.include_router(rerank_router)
    app.include_router(webui_router)
    app.include_router(proxy_router)
    app.include_router(tools_router)
    return HeaderCase(Cors(BodyLimit(JsonBody(app), lambda: state.max_body), lambda: state.cors))


async def native_completion(state: ServerState, body: NativeCompletionRequest, request: Request):
    """/completion's work, which /infill shares (server/http_infill.py): the reply or its stream."""
    _ready(state)
    body = state.defaults.apply(body)
    seqs = prompt_inputs(state, body.prompt)
    if not seqs or any(not ids for ids in seqs):
        raise APIError(400, "\"prompt\" must not be empty")
    if len(seqs) > 1:  # llama-server: one result per prompt, in order, each with its index
        if body.stream:
            raise APIError(400, f"prompt: {len(seqs)} prompts in one streamed request; llamapy streams one prompt per request")
        outs = await asyncio.gather(*(_one_completion(state, body, ids, request) for ids in seqs))
        bad = next((o for o in outs if not isinstance(o, dict)), None)
        return bad if bad is not None else [{**o, "index": i} for i, o in enumerate(outs)]
    return await _one_completion(state, body, seqs[0], request)


async def _one_completion(state: ServerState, body: NativeCompletionRequest, ids: list[int], request: Request):
    constraint = await compile_constraint(state, request_spec(body.grammar, body.json_schema))
    bias = request_logit_bias(state, body.logit_bias)
    req = GenRequest(ids, max_tokens=body.n_predict, sampling=body.sampling(body.n_probs), stop=body.stop_list(), n_probs=body.n_probs,
                     post_sampling_probs=body.post_sampling_probs, ignore_eos=body.ignore_eos, logit_bias=bias, **body.slot_params(),
                     **body.telemetry(),
                     spec=body.spec_overrides(), constraint=constraint)
    settings = body.generation_settings(format_logit_bias(with_eog(bias, sorted(state.model.tokenizer.vocab.eog_ids), body.ignore_eos)))
    p = submit(state, req)
    if body.stream:
        return EventStream(_native_stream(state, p, body.post_sampling_probs), p.close)
    text, evs = await p.collect(request.receive)
    if not evs or not evs[-1].final:
        return error_response(499, "client closed the request")
    if (err := final_error(evs[-1])) is not None:
        raise err
    return _native_final(state, evs[-1], text, [e for e in evs if e.token >= 0], body, settings)


def _ready(state: ServerState) -> None:
    if not state.ready:
        raise APIError(503, "Loading model")


def _probs(state: ServerState, ev: Event, post: bool = False) -> list[dict[str, Any]]:
    """llama-server's completion_probabilities entry of a token: the token and its top n_probs
    candidates as id, text and UTF-8 bytes, with the natural-log probability before the
    sampler chain ("logprob", "top_logprobs"), or with post_sampling_probs the probability
    among the chain's candidates ("prob", "top_probs")."""
    tok = state.model.tokenizer

    def entry(t: int, p: float) -> dict[str, Any]:
        raw = tok.token_to_piece(t)
        value = {"prob": p} if post else {"logprob": math.log(p) if p > 0 else None}  # (llama-server writes log(0) as null)
        return {"id": t, "token": raw.decode("utf-8", errors="replace"), "bytes": list(raw), **value}

    top = [entry(t, p) for t, p in (ev.probs or [])]
    return [{**entry(ev.token, ev.prob), ("top_probs" if post else "top_logprobs"): top}]


def stop_fields(ev: Event) -> dict[str, Any]:
    """llama-server's stop_type (eos | limit), or "grammar" with the grammar's message."""
    if ev.finish_reason == "grammar":
        return {"stop_type": "grammar", "grammar_error": ev.error, "finish_details": ev.error}
    out = {"stop_type": "eos" if ev.finish_reason == "stop" else "limit"}
    return out | ({"finish_details": ev.error} if ev.error else {})


def _native_final(state: ServerState, ev: Event, text: str, toks: list[Event], body: NativeCompletionRequest,
                  settings: dict[str, Any]) -> dict[str, Any]:
    u = ev.usage
    out: dict[str, Any] = {
        "content": text, "stop": True, **stop_fields(ev),
        "tokens_predicted": u.completion_tokens, "tokens_evaluated": u.prompt_tokens, "tokens_cached": u.prompt_tokens_cached,
        "truncated": ev.truncated, "generation_settings": settings, "timings": ev.timings, "model": state.alias,
    }
    if toks and toks[0].probs is not None:
        out["completion_probabilities"] = [p for e in toks for p in _probs(state, e, body.post_sampling_probs)]
    return out


async def _native_stream(state: ServerState, p: Pending, post: bool) -> AsyncIterator[str]:
    async for ev in p.events():
        if not ev.final:
            chunk = {"content": ev.text, "stop": False, "tokens": [ev.token] if ev.token >= 0 else []}
            if ev.timings is not None:  # timings_per_token
                chunk["timings"] = ev.timings
            if ev.progress is not None:  # return_progress
                chunk["prompt_progress"] = ev.progress
            if ev.probs is not None:  # llama-server sends each token's probabilities with it
                chunk["completion_probabilities"] = _probs(state, ev, post)
            yield sse(chunk)
            continue
        if (err := final_error(ev)) is not None:
            yield sse(error_body(err.status, err.message))
            return
        u = ev.usage
        yield sse({"content": ev.text, "stop": True, **stop_fields(ev),
                   "tokens_predicted": u.completion_tokens, "tokens_evaluated": u.prompt_tokens, "truncated": ev.truncated, "timings": ev.timings,
                   "model": state.alias})
