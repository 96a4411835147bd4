"""The server's default sampling settings, from `llamapy serve`'s --temp, --top-k, --top-p,
--min-p, --seed, -n/--n-predict and --n-probs, as llama-server applies them (server-schema.cpp
eval_llama_cmpl_schema: a task's params start from the command line's, and the request's
fields override them; server-context.cpp: a request's n_predict of -1 takes -n's).

A None field was not given on the command line: the request's own default stays (so a
server started without these flags behaves as before).  Applied to a parsed request body
(schemas.py) by apply(): only the fields the request did not send change."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

B = TypeVar("B")  # a pydantic request body (schemas._Sampling)

SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "seed")
LENGTH_FIELDS = ("n_predict", "max_completion_tokens", "max_tokens")  # the first one sent wins (schemas.py)


@dataclass(frozen=True, slots=True)
class RequestDefaults:
    temperature: float | None = None  # --temp
    top_k: int | None = None  # --top-k
    top_p: float | None = None  # --top-p
    min_p: float | None = None  # --min-p
    seed: int | None = None  # -s/--seed (-1: a random seed per request)
    n_predict: int | None = None  # -n/--n-predict (-1: no limit but the context)
    n_probs: int | None = None  # --n-probs: /completion's and /infill's n_probs (the routes that have the field)

    def apply(self, body: B) -> B:
        """body with the server's defaults in the fields it did not send (a copy; body when
        nothing changes).  The length limit: a request that sent none of n_predict,
        max_completion_tokens, max_tokens, or sent -1, gets -n."""
        sent = body.model_fields_set  # type: ignore[attr-defined]
        fields = type(body).model_fields  # type: ignore[attr-defined]
        update: dict[str, Any] = {k: getattr(self, k) for k in (*SAMPLING_FIELDS, "n_probs")
                                  if getattr(self, k) is not None and k not in sent and k in fields}
        if self.n_predict is not None:
            asked = next((getattr(body, f) for f in LENGTH_FIELDS if f in sent and getattr(body, f) is not None), None)
            if asked is None or asked == -1:
                for f in LENGTH_FIELDS:
                    if f in fields:
                        update[f] = None if f == "max_completion_tokens" else self.n_predict
        return body.model_copy(update=update) if update else body  # type: ignore[attr-defined]

    def props(self, params: dict[str, Any]) -> dict[str, Any]:
        """/props' default_generation_settings.params with the server's defaults in."""
        keys = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p,
                "seed": self.seed, "n_predict": self.n_predict, "n_probs": self.n_probs}
        return params | {k: v for k, v in keys.items() if v is not None}
