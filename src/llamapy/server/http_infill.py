"""/infill (llama-server's post_infill): fill-in-the-middle over the vocabulary's FIM tokens.
infill_request checks the body as llama-server does and lays out the prompt with its
format_prompt_infill (the repo-level pattern: [FIM_REP]myproject, each input_extra file after
[FIM_SEP]filename, then [FIM_PRE]prefix[FIM_SUF]suffix[FIM_MID]prompt, prefix:suffix cut 3:1
to fit a batch); the completion itself is /completion's (http.py)."""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .api_error import APIError
from .bridge import ServerState
from .schemas import NativeCompletionRequest

K_CHUNK_PREFIX = "\n\n--- snippet ---\n\n"  # llama-server's separator of extra chunks without [FIM_SEP]


def fim_tokens(state: ServerState) -> dict[str, int | None]:
    sp = state.model.tokenizer.vocab.special
    return {k: sp.get(k) for k in ("fim_pre", "fim_suf", "fim_mid", "fim_rep", "fim_sep")}


def format_prompt_infill(state: ServerState, prefix: str | list[int], suffix: str | list[int], extra: list[dict],
                         n_batch: int, n_predict: int, n_ctx: int, prompt: list[int]) -> list[int]:
    """llama-server's format_prompt_infill (spm_infill off)."""
    model, fim = state.model, fim_tokens(state)

    def tok(x: str | list[int]) -> list[int]:  # tokenize_mixed(..., false, false)
        return list(x) if isinstance(x, list) else model.tokenize(x, add_special=False, parse_special=False)

    t_pre, t_suf = tok(prefix), tok(suffix)
    extra_toks: list[int] = []
    if fim["fim_rep"] is not None:
        extra_toks += [fim["fim_rep"], *tok("myproject\n")]
    for chunk in extra:
        if fim["fim_sep"] is not None:
            extra_toks += [fim["fim_sep"], *tok(chunk.get("filename", "tmp") + "\n")]
        else:
            extra_toks += tok(K_CHUNK_PREFIX)
        extra_toks += tok(chunk["text"])
    if fim["fim_sep"] is not None:
        extra_toks += [fim["fim_sep"], *tok("filename\n")]
    n_pre = min(len(t_pre), 3 * (n_batch // 4))
    n_suf = min(len(t_suf), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_toks))
    inp = [fim["fim_pre"], *t_pre[len(t_pre) - n_pre:], *prompt]
    end = [fim["fim_suf"], *t_suf[:n_suf]]
    v = model.tokenizer.vocab
    if v.add_bos and v.special.get("bos") is not None:
        inp.insert(0, v.special["bos"])
    return [*extra_toks[len(extra_toks) - n_extra:], *inp, *end, fim["fim_mid"]]


def infill_request(state: ServerState, data: Any) -> NativeCompletionRequest:
    """The /completion request an /infill body becomes, or llama-server's errors."""
    fim = fim_tokens(state)
    missing = "".join(f"{what} token is missing. " for what, k in (("prefix", "fim_pre"), ("suffix", "fim_suf"),
                                                                    ("middle", "fim_mid")) if fim[k] is None)
    if missing:
        raise APIError(501, f"Infill is not supported by this model: {missing}")
    if not isinstance(data, dict):
        raise APIError(400, "request body: expected a JSON object")
    if "prompt" in data and not isinstance(data["prompt"], str):
        raise APIError(400, "\"prompt\" must be a string")
    for k in ("input_prefix", "input_suffix"):
        if k not in data:
            raise APIError(400, f"\"{k}\" is required")
    extra = data.get("input_extra", [])
    if not isinstance(extra, list):
        raise APIError(400, "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}")
    for chunk in extra:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise APIError(400, "extra_context chunk must contain a \"text\" field with a string value")
        if "filename" in chunk and not isinstance(chunk["filename"], str):
            raise APIError(400, "extra_context chunk's \"filename\" field must be a string")
    c = state.ctx.cparams
    n_predict = getattr(state.defaults, "n_predict", None)  # llama-server's params.n_predict: the server's -n
    prompt = state.model.tokenize(data.get("prompt", ""), add_special=False, parse_special=True)
    ids = format_prompt_infill(state, data["input_prefix"], data["input_suffix"], extra, c.n_batch,
                               n_predict if isinstance(n_predict, int) else -1, c.n_ctx_seq, prompt)
    try:
        return NativeCompletionRequest.model_validate({**data, "prompt": ids})
    except ValidationError as e:
        raise APIError(400, "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())) from None
