"""llama-server's logit_bias: a request's per-token additive biases, parsed as its
server-schema.cpp does (an array of [token, bias] pairs or an object {token: bias}; a token as an
id or as text, tokenized without specials; bias false bans the token, -inf), and written back in
generation_settings as its format_logit_bias does ([{"bias": b, "token": id}], -inf as null)."""
from __future__ import annotations

import math
from typing import Any, Callable

LogitBias = tuple[tuple[int, float], ...]  # (token id, additive bias), in the request's order


def _bias(v: Any) -> float | None:
    if isinstance(v, bool):
        return -math.inf if v is False else None  # true: ignored, as llama-server
    if isinstance(v, (int, float)):
        return float(v)
    return None


def parse_logit_bias(data: Any, n_vocab: int, tokenize: Callable[[str], list[int]]) -> LogitBias:
    """The request's logit_bias as (token, bias) pairs; malformed entries and ids outside
    [0, n_vocab) are skipped, as llama-server skips them."""
    if isinstance(data, list):
        items = [(el[0], el[1]) for el in data if isinstance(el, list) and len(el) == 2]
    elif isinstance(data, dict):
        items = [(int(k) if k.lstrip("-").isdigit() else k, v) for k, v in data.items()]
    else:
        return ()
    out: list[tuple[int, float]] = []
    for key, value in items:
        bias = _bias(value)
        if bias is None:
            continue
        if isinstance(key, int) and not isinstance(key, bool):
            if 0 <= key < n_vocab:
                out.append((key, bias))
        elif isinstance(key, str):
            out.extend((t, bias) for t in tokenize(key))
    return tuple(out)


def with_eog(bias: LogitBias, eog_ids: list[int], ignore_eos: bool) -> LogitBias:
    """llama-server's ignore_eos: the end-of-generation tokens' -inf biases appended."""
    return bias + tuple((t, -math.inf) for t in eog_ids) if ignore_eos else bias


def format_logit_bias(bias: LogitBias) -> list[dict[str, Any]]:
    """generation_settings.logit_bias as llama-server writes it (JSON has no -inf: null)."""
    return [{"bias": b if math.isfinite(b) else None, "token": t} for t, b in bias]
