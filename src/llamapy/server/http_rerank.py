"""Reranking routes (llama-server's post_rerank): /rerank, /reranking, /v1/rerank, /v1/reranking.
Each document is scored against the query by the model's classifier head (--pooling rank:
bge-reranker's cls / cls.output, or Qwen3-Reranker's "yes"/"no" softmax); the prompt is
llama-server's format_prompt_rerank (the GGUF's rerank template, else [BOS] query [EOS] [SEP]
document [EOS] as the vocabulary adds them); results sorted by score, cut to top_n; Jina's
shape ("documents": index, relevance_score) or TEI's ("texts": a bare list of index, score, with return_text)."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from .api_error import APIError
from .bridge import ServerState
from .http_embed import _body, run_embed_job

router = APIRouter()


def rerank_tokens(state: ServerState, query: str, doc: str) -> list[int]:
    """llama-server's format_prompt_rerank."""
    model = state.model
    template = model.gguf.get("tokenizer.chat_template.rerank")
    if isinstance(template, str):
        return model.tokenize(template.replace("{query}", query).replace("{document}", doc), add_special=False,
                              parse_special=True)
    v = model.tokenizer.vocab
    sp = v.special
    eos = sp.get("eos") if sp.get("eos") is not None else sp.get("sep")
    add_sep = bool(model.gguf.get("tokenizer.ggml.add_sep_token", v.model == "bert"))  # llama_vocab: WPM adds [SEP]
    out: list[int] = []
    if v.add_bos and sp.get("bos") is not None:
        out.append(sp["bos"])
    out += model.tokenize(query, add_special=False, parse_special=False)
    if v.add_eos and eos is not None:
        out.append(eos)
    if add_sep and sp.get("sep") is not None:
        out.append(sp["sep"])
    out += model.tokenize(doc, add_special=False, parse_special=False)
    if v.add_eos and eos is not None:
        out.append(eos)
    return out


@router.post("/rerank", include_in_schema=False)
@router.post("/reranking", include_in_schema=False)
@router.post("/v1/rerank", include_in_schema=False)
@router.post("/v1/reranking", include_in_schema=False)
async def rerank(request: Request) -> Any:
    state: ServerState = request.app.state.llama
    if not state.embedding or state.pooling != "rank":
        raise APIError(501, "This server does not support reranking. Start it with `--reranking`")
    body = await _body(request)
    tei = "texts" in body
    query = body.get("query")
    if "query" not in body:
        raise APIError(400, "\"query\" must be provided")
    if not isinstance(query, str):
        raise APIError(400, "\"query\" must be a string")
    docs = body.get("documents", body.get("texts", []))
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise APIError(400, "\"documents\" must be a non-empty string array")
    top_n = body.get("top_n", len(docs))
    if isinstance(top_n, bool) or not isinstance(top_n, int):
        raise APIError(400, f"top_n: expected an integer, got {top_n!r}")
    seqs = [rerank_tokens(state, query, d) for d in docs]
    limit = state.scheduler.embedder.max_tokens
    for s in seqs:
        if len(s) > limit:
            raise APIError(500, f"input ({len(s)} tokens) is too large to process. increase the physical batch size "
                                f"(current batch size: {limit}; -ub and -b)")
    res = await run_embed_job(state, seqs, -1, "rerank")
    label = "score" if tei else "relevance_score"
    items = []
    for i, (v, _n) in enumerate(res):
        item: dict[str, Any] = {"index": i, label: float(v[0])}
        if tei and body.get("return_text", False):
            item["text"] = docs[i]
        items.append(item)
    items.sort(key=lambda x: -x[label])  # stable: ties keep document order (std::sort may not)
    items = items[: max(0, min(top_n, len(items)))]
    if tei:
        return items
    n = sum(n for _v, n in res)
    return {"model": body.get("model", state.alias), "object": "list",
            "usage": {"prompt_tokens": n, "total_tokens": n}, "results": items}
