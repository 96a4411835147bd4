"""llama-cpp-python's Llama.embed and Llama.create_embedding over embed.Embedder: inputs
tokenized with BOS and without special-token parsing, truncated to what a batch holds
(truncate=True), unnormalised unless normalize=True (euclidean), many inputs per decode as
the context's sequences allow; pooling none gives each input's per-token vectors."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..context import Context
from ..embed import POOLING_TYPES, Embedder, embd_normalize

# llama-cpp-python's pooling_type ints (llama_cpp.LLAMA_POOLING_TYPE_*): -1 unspecified
POOLING_BY_INT = {-1: None, 0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


def pooling_arg(pooling_type: Any) -> str | None:
    """pooling_type as llama-cpp-python passes it (an int, -1: the model's) or a name."""
    if pooling_type is None or isinstance(pooling_type, str):
        return pooling_type
    if pooling_type not in POOLING_BY_INT:
        raise ValueError(f"pooling_type {pooling_type}: expected -1 (the model's) or 0..4 "
                         f"({', '.join(f'{k} {v}' for k, v in POOLING_BY_INT.items() if k >= 0)})")
    return POOLING_BY_INT[pooling_type]


def make_embedder(ctx: Context, pooling: str | None) -> Embedder:
    """An Embedder that leaves the context generating (embeddings on only inside embed_texts)."""
    was = ctx.embeddings
    e = Embedder(ctx, pooling, -1)
    ctx.embeddings = was
    return e


def embed_texts(e: Embedder, texts: list[str], normalize: bool, truncate: bool) -> tuple[list, int]:
    """(each text's embedding as lists of floats, total tokens)."""
    ctx = e.ctx
    seqs = [ctx.model.tokenize(t, add_special=True, parse_special=False) for t in texts]
    if truncate:
        seqs = [s[: e.max_tokens] for s in seqs]
    was, ctx.embeddings = ctx.embeddings, True
    try:
        res = e.embed_tokens(seqs)
    finally:
        ctx.embeddings = was
    out = []
    for r in res:
        v = embd_normalize(r.embedding, 2) if normalize else np.asarray(r.embedding, dtype=np.float32)
        out.append(v.tolist())
    return out, sum(len(s) for s in seqs)


def embedding_response(data: list, n_tokens: int, model: str) -> dict[str, Any]:
    """llama-cpp-python's CreateEmbeddingResponse."""
    return {"object": "list", "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(data)],
            "model": model, "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}


def pooling_type_int(e: Embedder) -> int:
    return POOLING_TYPES[e.pooling]
