"""llama-server's prompt shapes (server-common.cpp tokenize_input_prompts / _subprompt), shared by
/completion and the embedding routes.  One prompt is a string, a list of token ids, a list mixing
strings and ids (only the first string gets BOS: tokenize_mixed), or an object {"prompt_string":
...}; on the embedding routes also {"content": [{"type": "text", "text": ...}, ...]} (the parts'
texts concatenated).  A list that holds no bare token id is a list of prompts.  Multimodal data
is refused: llamapy serves text models."""
from __future__ import annotations

from typing import Any

from .api_error import APIError
from .bridge import ServerState

MEDIA_PARTS = ("image_url", "input_audio", "input_video")


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _token(state: ServerState, t: Any, field: str) -> int:
    if not _is_id(t):
        raise APIError(400, f"{field}: {t!r} is neither a string nor a token id")
    if not 0 <= t < state.model.n_vocab:
        raise APIError(400, f"{field}: token id {t} out of range (n_vocab = {state.model.n_vocab})")
    return t


def _mixed(state: ServerState, p: list[Any], field: str) -> list[int]:
    """tokenize_mixed: strings tokenized (BOS only when the first element is a string), ids kept."""
    out: list[int] = []
    for i, x in enumerate(p):
        if isinstance(x, str):
            out += state.model.tokenize(x, add_special=i == 0, parse_special=True)
        else:
            out.append(_token(state, x, field))
    return out


def _content_parts(state: ServerState, parts: Any, field: str) -> list[int]:
    """tokenize_oai_content_array for a text model: text parts only, concatenated."""
    if not isinstance(parts, list):
        raise APIError(400, "\"content\" must be an array")
    for p in parts:
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in MEDIA_PARTS:
            raise APIError(500, f"{field}: {kind} content, but the model does not support multimodal requests")
        if kind != "text":
            raise APIError(400, f"{field}: unsupported content part type {kind!r}")
    return state.model.tokenize("".join(str(p.get("text", "")) for p in parts), add_special=True, parse_special=True)


def subprompt(state: ServerState, p: Any, field: str, content_parts: bool = False) -> list[int]:
    if isinstance(p, str):
        return state.model.tokenize(p, add_special=True, parse_special=True)
    if isinstance(p, list):
        return _mixed(state, p, field)
    if isinstance(p, dict) and content_parts and "content" in p:
        return _content_parts(state, p["content"], field)
    if isinstance(p, dict) and "prompt_string" in p:
        if "multimodal_data" in p:
            raise APIError(500, "Multimodal data provided, but model does not support multimodal requests.")
        if not isinstance(p["prompt_string"], (str, list)):
            raise APIError(400, f"{field}: prompt_string must be a string or a list of strings and token ids")
        return subprompt(state, p["prompt_string"], field)
    raise APIError(400, f"\"{field}\" elements must be a string, a list of tokens, a JSON object containing a prompt "
                        "string, or a list of mixed strings & tokens.")


def prompt_inputs(state: ServerState, prompt: Any, field: str = "prompt", content_parts: bool = False) -> list[list[int]]:
    """Every prompt of the field's value, as token ids ([] for an empty list)."""
    if isinstance(prompt, list) and not any(_is_id(x) for x in prompt):
        return [subprompt(state, p, field, content_parts) for p in prompt]
    return [subprompt(state, prompt, field, content_parts)]
