"""A route's request handed to the scheduler thread: its prompt as token ids (tokenize_prompt)
and its submission (submit), with the HTTP errors they answer for."""
from __future__ import annotations

from typing import Any

from .api_error import APIError
from .bridge import Pending, ServerState
from .logit_bias import LogitBias, parse_logit_bias
from .prompt_input import subprompt
from .request import Request as GenRequest
from .scheduler import QueueFullError
from .slots import PromptTooLongError

RETRY_AFTER_S = 1  # the Retry-After of a 503 for a full queue


def submit(state: ServerState, req: GenRequest) -> Pending:
    """Hand a request to the scheduler; 503 while loading or shutting down and (with
    Retry-After) when the queue is full, 400 for a prompt that cannot fit."""
    if state.scheduler is None:
        raise APIError(503, "Loading model")
    if state.embedding:
        raise APIError(501, "This server was started with `--embeddings`: it serves /embedding and /v1/embeddings "
                            "only. Start it without `--embeddings` for completions")
    if state.draining:
        raise APIError(503, "server is shutting down")
    req.timeout = state.timeout
    try:
        return Pending(state.scheduler, req)
    except QueueFullError as e:
        raise APIError(503, str(e), {"Retry-After": str(RETRY_AFTER_S)}) from None
    except PromptTooLongError as e:  # llama-server's ERROR_TYPE_EXCEED_CONTEXT_SIZE
        raise APIError(400, str(e), type="exceed_context_size_error",
                       extra={"n_prompt_tokens": e.n_prompt_tokens, "n_ctx": e.n_ctx}) from None
    except ValueError as e:
        raise APIError(400, str(e)) from None


def tokenize_prompt(state: ServerState, prompt: str | list[int]) -> list[int]:
    """One prompt (a string, or token ids checked against the vocabulary) as server/prompt_input.py reads it."""
    return subprompt(state, prompt, "prompt")


def request_logit_bias(state: ServerState, data: Any) -> LogitBias:
    """The request's logit_bias field as (token, bias) pairs (server/logit_bias.py)."""
    if data is None:
        return ()
    return parse_logit_bias(data, state.model.n_vocab, lambda s: state.model.tokenize(s, add_special=False, parse_special=False))
