"""create_completion: a prompt becomes the server's Request (server/request.py) and its
Events become llama-cpp-python's text_completion dicts (llama_types.CreateCompletionResponse
and its stream chunks)."""
from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..sampling import LLAMA_DEFAULT_SEED, SamplingParams
from ..server.request import Event, Request
from .engine import Engine, GenerationError


@dataclass(slots=True)
class GenOptions:
    """The sampling and stopping arguments create_completion and create_chat_completion share
    (llama-cpp-python's names and defaults)."""

    max_tokens: int | None = 16  # None or <= 0: until end of generation or the context's end
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    stop: list[str] = field(default_factory=list)
    logprobs: int = 0
    seed: int = LLAMA_DEFAULT_SEED

    def request(self, prompt: list[int], constraint: Any = None) -> Request:
        sp = SamplingParams(seed=self.seed & 0xFFFFFFFF, n_probs=self.logprobs, top_k=self.top_k, top_p=self.top_p,
                            min_p=self.min_p, temp=self.temperature, penalty_repeat=self.repeat_penalty,
                            penalty_freq=self.frequency_penalty, penalty_present=self.presence_penalty)
        n = -1 if self.max_tokens is None or self.max_tokens <= 0 else self.max_tokens
        return Request(prompt, max_tokens=n, sampling=sp, stop=list(self.stop), n_probs=self.logprobs, constraint=constraint)


def stop_list(stop: str | list[str] | None) -> list[str]:
    return [] if stop is None else [stop] if isinstance(stop, str) else list(stop)


def check_final(ev: Event) -> None:
    """A final Event that is not stop / length is an error for the caller."""
    if ev.finish_reason not in ("stop", "length"):
        raise GenerationError(f"generation ended ({ev.finish_reason}): {ev.error}")


def usage(ev: Event) -> dict[str, int]:
    u = ev.usage
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens}


def logprobs_of(eng: Engine, evs: list[Event], offset: int) -> dict[str, Any] | None:
    """llama-cpp-python's CompletionLogprobs: tokens, text_offset, token_logprobs, top_logprobs."""
    toks = [e for e in evs if e.token >= 0 and e.probs is not None]
    if not toks:
        return None
    piece = lambda t: eng.model.tokenizer.token_to_piece(t).decode("utf-8", errors="replace")  # noqa: E731
    lp = lambda p: math.log(p) if p > 0 else -math.inf  # noqa: E731
    offsets = []
    for e in toks:
        offsets.append(offset)
        offset += len(piece(e.token))
    return {"tokens": [piece(e.token) for e in toks], "text_offset": offsets, "token_logprobs": [lp(e.prob) for e in toks],
            "top_logprobs": [{piece(t): lp(p) for t, p in e.probs} for e in toks]}


def completion(eng: Engine, model_name: str, prompt: str | list[int], opts: GenOptions, echo: bool = False,
               constraint: Any = None) -> dict[str, Any]:
    """The whole text_completion dict."""
    ids = tokenize_prompt(eng, prompt)
    evs = list(eng.run(opts.request(ids, constraint)))
    check_final(evs[-1])
    prefix = prompt_text(eng, prompt) if echo else ""
    text = prefix + "".join(e.text for e in evs)
    choice = {"text": text, "index": 0, "logprobs": logprobs_of(eng, evs, len(prefix)) if opts.logprobs else None,
              "finish_reason": evs[-1].finish_reason}
    return {**head(model_name), "choices": [choice], "usage": usage(evs[-1])}


def completion_chunks(eng: Engine, model_name: str, prompt: str | list[int], opts: GenOptions, echo: bool = False,
                      constraint: Any = None) -> Iterator[dict[str, Any]]:
    """stream=True: one chunk per piece of text, then one with finish_reason (its text
    empty); the texts concatenate to the non-streamed text."""
    ids = tokenize_prompt(eng, prompt)
    req = opts.request(ids, constraint)
    h = head(model_name)
    offset = 0
    if echo:
        prefix = prompt_text(eng, prompt)
        offset = len(prefix)
        yield {**h, "choices": [{"text": prefix, "index": 0, "logprobs": None, "finish_reason": None}]}
    for ev in eng.run(req):
        if ev.final:
            check_final(ev)
            yield {**h, "choices": [{"text": ev.text, "index": 0, "logprobs": None, "finish_reason": ev.finish_reason}]}
            return
        if ev.text or opts.logprobs:
            lps = logprobs_of(eng, [ev], offset) if opts.logprobs else None
            offset += len(ev.text)
            yield {**h, "choices": [{"text": ev.text, "index": 0, "logprobs": lps, "finish_reason": None}]}


def head(model_name: str) -> dict[str, Any]:
    return {"id": f"cmpl-{uuid.uuid4()}", "object": "text_completion", "created": int(time.time()), "model": model_name}


def tokenize_prompt(eng: Engine, prompt: str | list[int]) -> list[int]:
    """A string with BOS and special tokens parsed (as the server and `llamapy run`); a list
    of token ids as given."""
    if isinstance(prompt, list):
        return list(prompt)
    return eng.model.tokenize(prompt, add_special=True, parse_special=True)


def prompt_text(eng: Engine, prompt: str | list[int]) -> str:
    if isinstance(prompt, str):
        return prompt
    return b"".join(eng.model.tokenizer.token_to_piece(t) for t in prompt).decode("utf-8", errors="replace")
