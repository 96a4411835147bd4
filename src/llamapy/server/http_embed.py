"""Embedding routes (llama-server's handle_embeddings_impl): /embedding and /embeddings (the
native shape: [{"index", "embedding": [[...]]}], per-token rows with --pooling none) and
/v1/embeddings (OpenAI: string, list, token-id input; encoding_format float | base64; usage).
Inputs are tokenized here and run in the scheduler thread (server/embed_jobs.py)."""
from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
from fastapi import APIRouter, Request

from .api_error import APIError, json_body
from .bridge import ServerState
from .embed_jobs import EmbedJob
from .prompt_input import prompt_inputs

# not in /openapi.json: the bodies are free-form JSON checked here as llama-server does, and a server
# without --embedding answers 501 by design (the contract test's "no server error" check would flag it)
router = APIRouter()


def _state(request: Request) -> ServerState:
    return request.app.state.llama


def tokenize_inputs(state: ServerState, prompt: Any) -> list[list[int]]:
    """llama-server's input shapes for embeddings (server/prompt_input.py), content parts included."""
    return prompt_inputs(state, prompt, "input", content_parts=True)


async def embed(state: ServerState, body: dict[str, Any], oai: bool) -> tuple[list, bool]:
    """(each input's (vectors, n_tokens), oai) after llama-server's checks; a "content" body is
    answered in the native shape even on /v1/embeddings."""
    if not state.embedding:
        raise APIError(501, "This server does not support embeddings. Start it with `--embeddings`")
    if state.scheduler is None:
        raise APIError(503, "Loading model")
    if oai and state.pooling == "none":
        raise APIError(400, "Pooling type 'none' is not OAI compatible. Please use a different pooling type")
    if "input" in body:
        prompt = body["input"]
    elif "content" in body:
        prompt, oai = body["content"], False
    else:
        raise APIError(400, "\"input\" or \"content\" must be provided")
    seqs = tokenize_inputs(state, prompt)
    if not seqs:
        raise APIError(400, "\"input\" must not be empty")
    if any(not s for s in seqs):
        raise APIError(400, "Input content cannot be empty")
    limit = state.scheduler.embedder.max_tokens
    for s in seqs:
        if len(s) > limit:
            raise APIError(500, f"input ({len(s)} tokens) is too large to process. increase the physical batch size "
                                f"(current batch size: {limit}; -ub and -b)")
    norm = body.get("embd_normalize", state.embd_normalize)
    if isinstance(norm, bool) or not isinstance(norm, int):
        raise APIError(400, f"embd_normalize: expected an integer, got {norm!r}")
    return await run_embed_job(state, seqs, norm, "embedding"), oai


async def run_embed_job(state: ServerState, seqs: list, norm: int, what: str) -> list:
    """One EmbedJob through the scheduler's loop, awaited: its (vector, n_tokens) per sequence;
    a refused job is a 400, one past --timeout a 504 naming `what` (embedding, rerank)."""
    loop = asyncio.get_running_loop()
    job = EmbedJob(seqs, norm, loop, loop.create_future())
    try:
        state.scheduler.submit_embed(job)
        return await asyncio.wait_for(job.future, state.timeout or None)
    except ValueError as e:
        raise APIError(400, str(e)) from None
    except asyncio.TimeoutError:
        raise APIError(504, f"{what} request took longer than --timeout {state.timeout:g} s") from None


def _b64(v: np.ndarray) -> str:
    return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")


@router.post("/embedding", include_in_schema=False)
@router.post("/embeddings", include_in_schema=False)
async def embeddings_native(request: Request) -> Any:
    state = _state(request)
    res, _ = await embed(state, await _body(request), False)
    return [{"index": i, "embedding": np.atleast_2d(v).tolist()} for i, (v, _n) in enumerate(res)]


@router.post("/v1/embeddings", include_in_schema=False)
async def embeddings_oai(request: Request) -> Any:
    state = _state(request)
    body = await _body(request)
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise APIError(400, "The format to return the embeddings in. Can be either float or base64")
    res, oai = await embed(state, body, True)
    if not oai:
        return [{"index": i, "embedding": np.atleast_2d(v).tolist()} for i, (v, _n) in enumerate(res)]
    data = []
    for i, (v, _n) in enumerate(res):
        if fmt == "base64":
            data.append({"embedding": _b64(v), "index": i, "object": "embedding", "encoding_format": "base64"})
        else:
            data.append({"embedding": np.asarray(v).tolist(), "index": i, "object": "embedding"})
    n = sum(n for _v, n in res)
    return {"model": body.get("model", state.alias), "object": "list",
            "usage": {"prompt_tokens": n, "total_tokens": n}, "data": data}


async def _body(request: Request) -> dict[str, Any]:
    return await json_body(request, dict, "request body: expected a JSON object")
