"""llama-server's `__verbose` field: a completion reply (/v1/completions, /v1/chat/completions)
also carries the request's result in /completion's own shape, the rendered prompt included, when
the request says `"verbose": true` or, without it, when the server runs with -v/--verbose
(llama-server: params.verbose = verbosity > 9, which its --verbose sets)."""
from __future__ import annotations

from typing import Any

from .bridge import ServerState
from .request import Event


def wants_verbose(state: ServerState, body: Any) -> bool:
    """The request's `verbose`, else the server's -v."""
    v = getattr(body, "verbose", None)
    return state.verbose if v is None else bool(v)


def verbose_field(state: ServerState, prompt: str, text: str, ids: list[int], evs: list[Event]) -> dict[str, Any]:
    """server_task_result_cmpl_final::to_json_non_oaicompat's fields that llamapy has."""
    ev = evs[-1]
    stop_type = ("word" if ev.stopping_word else "eos") if ev.finish_reason == "stop" else "limit"
    return {"index": 0, "content": text, "tokens": [e.token for e in evs if e.token >= 0], "stop": True, "model": state.alias, "tokens_predicted": ev.usage.completion_tokens,
            "tokens_evaluated": len(ids), "prompt": prompt, "truncated": ev.truncated,
            "stop_type": stop_type,
            "stopping_word": ev.stopping_word, "tokens_cached": ev.usage.prompt_tokens_cached, "timings": ev.timings}
