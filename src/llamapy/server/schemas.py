"""Request bodies, validated by pydantic: wrong types and out-of-range values become 400s that
name the field (llama-server's status for them).  Unknown fields are ignored, as OpenAI clients send many."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from ..sampling import LLAMA_DEFAULT_SEED, SamplingParams

BUILD_INFO = "llamapy"  # /props build_info and the OpenAI responses' system_fingerprint (llama_build_info's role)


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # "5" is not 5: what the schema says is what passes

    model: str | None = None
    verbose: bool | None = None  # llama-server's: the reply carries __verbose (None: the server's -v)
    temperature: float = Field(0.8, ge=0.0, le=100.0)
    top_k: int = Field(40, ge=0)
    top_p: float = Field(0.95, ge=0.0, le=1.0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=-1, le=0xFFFFFFFF)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repeat_penalty: float = Field(1.0, ge=0.0)
    repeat_last_n: int = Field(64, ge=-1)
    stop: str | list[str] | None = None
    stream: bool = False
    ignore_eos: bool = False
    logit_bias: Any = None  # llama-server's: [[token, bias], ...] or {token: bias} (server/logit_bias.py)
    id_slot: int = Field(-1, ge=-1)  # llama-server's: the slot to run on (its prompt cache); -1: any
    n_keep: int | None = Field(None, ge=-1)  # context shift: tokens kept (-1: the prompt); None: the server's --keep
    n_discard: int = Field(0, ge=0)  # context shift: tokens dropped after them (0: half of the rest)
    cache_prompt: bool = True  # llama-server's: False decodes the whole prompt (no cached prefix reused)
    n_cache_reuse: int | None = Field(None, ge=0)  # prompt cache chunks this long are shifted into place; None: --cache-reuse
    lora: Any = None  # llama-server's per-request adapters [{id, scale}] (unlisted ids: 0); None: the global scales
    # llama-server's per-request speculative fields (flat, dotted keys); None: the server's
    spec_n_max: int | None = Field(None, alias="speculative.n_max", ge=0)
    spec_n_min: int | None = Field(None, alias="speculative.n_min", ge=0)
    spec_p_min: float | None = Field(None, alias="speculative.p_min", ge=0.0, le=1.0)
    # llama-server's constraints: a GBNF grammar or a JSON Schema (not both)
    grammar: str | None = None
    json_schema: dict[str, Any] | bool | None = None
    timings_per_token: bool = False  # llama-server's: each streamed chunk carries the timings so far
    return_progress: bool = False  # llama-server's: stream prompt_progress chunks while the prompt is read

    def telemetry(self) -> dict[str, bool]:
        """timings_per_token and return_progress as server.request.Request's keyword arguments
        (llama-server's: they act on a stream only)."""
        return {"timings_per_token": self.timings_per_token and self.stream, "return_progress": self.return_progress and self.stream}

    def spec_overrides(self) -> dict[str, float]:
        """The speculative fields the request set, as {"n_max": .., "n_min": .., "p_min": ..}."""
        v = {"n_max": self.spec_n_max, "n_min": self.spec_n_min, "p_min": self.spec_p_min}
        return {k: x for k, x in v.items() if x is not None}

    def slot_params(self) -> dict[str, Any]:
        """The request's slot fields, as server.request.Request's keyword arguments."""
        from .api_error import APIError
        from .lora_scales import LoraRequestError, lora_entries

        try:
            lora = None if self.lora is None else lora_entries(self.lora)
        except LoraRequestError as e:
            raise APIError(400, str(e)) from None
        return {"id_slot": self.id_slot, "n_keep": self.n_keep, "n_discard": self.n_discard, "n_cache_reuse": self.n_cache_reuse,
                "cache_prompt": self.cache_prompt, "lora": lora}

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]

    def sampling(self, n_probs: int = 0) -> SamplingParams:
        seed = LLAMA_DEFAULT_SEED if self.seed is None or self.seed < 0 else self.seed
        return SamplingParams(
            seed=seed, n_probs=n_probs, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p,
            temp=self.temperature, penalty_last_n=self.repeat_last_n, penalty_repeat=self.repeat_penalty,
            penalty_freq=self.frequency_penalty, penalty_present=self.presence_penalty,
        )


class StreamOptions(BaseModel):
    include_usage: bool = False


class CompletionRequest(_Sampling):
    """POST /v1/completions."""

    prompt: str | list[int] = Field(min_length=1)
    max_tokens: int | None = Field(16, ge=-1)
    logprobs: int | None = Field(None, ge=0, le=20)
    n: int = Field(1, ge=1, validation_alias=AliasChoices("n_cmpl", "n"))  # llama-server's n_cmpl: 1..the slots (-np)
    echo: bool = False
    stream_options: StreamOptions | None = None


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # "5" is not 5: what the schema says is what passes

    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # "5" is not 5: what the schema says is what passes

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None  # assistant: the calls it made
    tool_call_id: str | None = None  # tool: the call this answers
    name: str | None = None
    reasoning_content: str | None = None  # assistant: its thinking (templates that render it)

    def as_dict(self) -> dict[str, Any]:
        c = self.content
        text = "".join(p.text for p in c) if isinstance(c, list) else (c or "")
        d: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role, "content": text}
        if self.tool_calls:
            d["tool_calls"] = self.tool_calls
        if self.reasoning_content:
            d["reasoning_content"] = self.reasoning_content
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=-1)
    max_completion_tokens: int | None = Field(None, ge=-1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    n: int = Field(1, ge=1, validation_alias=AliasChoices("n_cmpl", "n"))  # llama-server's n_cmpl: 1..the slots (-np)
    stream_options: StreamOptions | None = None
    response_format: dict[str, Any] | None = None  # {"type": "text" | "json_object" | "json_schema", ...}
    tools: list[Any] | None = None  # checked by tools.parse_tools (a 400 that names the problem)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None  # None: the template's supports_parallel_tool_calls (llama-server)
    chat_template_kwargs: dict[str, Any] | None = None  # extra template variables, over --chat-template-kwargs
    reasoning_format: Literal["none", "deepseek", "deepseek-legacy", "auto"] | None = None  # over --reasoning-format
    reasoning_effort: str | None = None
    reasoning_budget_tokens: int | None = Field(None, ge=-1)  # -1 / absent: --reasoning-budget
    thinking_budget_tokens: int | None = Field(None, ge=-1)  # llama-server's other name for it
    reasoning_budget_message: str | None = None  # over --reasoning-budget-message
    add_generation_prompt: bool = True
    continue_final_message: bool | None = None  # vLLM's name for prefilling the last assistant message

    def n_predict(self) -> int:
        v = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        return -1 if v is None else v

    def n_probs(self) -> int:
        return (self.top_logprobs or 1) if self.logprobs else 0


class NativeCompletionRequest(_Sampling):
    """POST /completion (llama.cpp's own shape)."""

    prompt: Any  # llama-server's shapes (server/prompt_input.py): a string, ids, mixed, {"prompt_string"}, a list of those
    n_predict: int = Field(-1, ge=-1)
    n_probs: int = Field(0, ge=0, le=100)
    post_sampling_probs: bool = False

    def generation_settings(self, logit_bias: list[dict[str, Any]]) -> dict[str, Any]:
        """llama-server's generation_settings: the request's settings that llamapy applies (the
        samplers in the chain's order; llama-server also lists ones llamapy does not have).
        logit_bias: llama-server's format_logit_bias of the biases applied (ignore_eos' included)."""
        return {"seed": self.sampling().seed, "temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "min_p": self.min_p, "repeat_last_n": self.repeat_last_n, "repeat_penalty": self.repeat_penalty,
                "presence_penalty": self.presence_penalty, "frequency_penalty": self.frequency_penalty,
                "stop": self.stop_list(), "max_tokens": self.n_predict, "n_predict": self.n_predict,
                "ignore_eos": self.ignore_eos, "stream": self.stream, "logit_bias": logit_bias, "n_probs": self.n_probs,
                "n_discard": self.n_discard, "min_keep": 0,
                "grammar": self.grammar or "", "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"],
                "post_sampling_probs": self.post_sampling_probs, "timings_per_token": self.timings_per_token,
                **{f"speculative.{k}": v for k, v in self.spec_overrides().items()}}


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # "5" is not 5: what the schema says is what passes

    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # "5" is not 5: what the schema says is what passes

    tokens: list[int]

    @model_validator(mode="after")
    def _non_negative(self) -> "DetokenizeRequest":
        bad = [t for t in self.tokens if t < 0]
        if bad:
            raise ValueError(f"tokens: negative token id {bad[0]}")
        return self


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: int


class ErrorResponse(BaseModel):
    """OpenAI's error shape, which every error response has."""

    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": what}
    for code, what in ((400, "Bad request: malformed JSON, a missing or invalid field"), (401, "Missing or wrong API key"), (404, "Not found"),
                       (413, "Request body too large"), (500, "Internal error"),
                       (501, "Endpoint not enabled"), (503, "Loading, shutting down or busy"), (504, "Request timed out"))
}


# ---- what the routes answer (documentation and contract tests; extra fields allowed) --------
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class UsageOut(_Open):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(_Open):
    index: int
    text: str
    finish_reason: str | None


class CompletionResponse(_Open):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: UsageOut | None = None


class ToolCallOut(_Open):
    id: str
    type: Literal["function"]
    function: dict[str, str]


class ChatMessageOut(_Open):
    role: Literal["assistant"]
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(_Open):
    index: int
    message: ChatMessageOut
    finish_reason: str | None


class ChatCompletionResponse(_Open):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageOut | None = None


class NativeCompletionResponse(_Open):
    content: str
    stop: bool
    stop_type: str
    tokens_predicted: int
    tokens_evaluated: int


class TokenizeResponse(_Open):
    tokens: list[int] | list[dict[str, Any]]


class DetokenizeResponse(_Open):
    content: str


def ok_response(model: type[BaseModel], stream: bool = False) -> dict[int | str, dict[str, Any]]:
    """A route's 200: model as JSON, and server-sent events when the request asks to stream."""
    out: dict[str, Any] = {"model": model}
    if stream:
        out["content"] = {"text/event-stream": {"schema": {}}}  # data: JSON chunks, then [DONE]
    return {200: out}
