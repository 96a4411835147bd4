"""`llamapy embedding`: llama-embedding (examples/embedding/embedding.cpp): one prompt per line
(or per --embd-separator), each embedded and printed as llama.cpp does: a summary (default),
json, json+ (with the cosine similarity matrix), array or raw."""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from .flags import add_context, add_embedding, add_model


def add_parser(sub) -> None:
    p = sub.add_parser("embedding", help="print the embeddings of one or more texts (llama-embedding)")
    add_model(p)
    add_context(p)
    add_embedding(p, switch=False)
    p.add_argument("-p", "--prompt", required=True, help="the texts, one per line (or per --embd-separator)")
    p.add_argument("--embd-separator", default="\n", help="separator of the texts in -p (default: newline)")
    p.add_argument("--cls-separator", default="\t",
                   help="separator of query and document in a --pooling rank line (default: tab)")
    p.add_argument("--embd-output-format", default="", choices=("", "json", "json+", "array", "raw"),
                   help="empty: a summary; json: OpenAI-style; json+: with the cosine similarity matrix; array; raw")
    p.set_defaults(fn=cmd_embedding)


def cmd_embedding(a: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..embed import Embedder
    from .args import ctx_params, load_context

    prompts = a.prompt.split(a.embd_separator) if a.embd_separator else [a.prompt]
    if len(prompts) > 1 and prompts[-1] == "":
        prompts.pop()  # llama.cpp's split_lines drops a trailing empty line
    params = ctx_params(a)
    n_seq = a.parallel if a.parallel > 1 else min(max(len(prompts), 1), 64)  # llama-embedding: -np 1 -> unified, many
    params = replace(params, n_seq_max=n_seq, kv_unified=True)
    if params.n_ctx and params.n_batch < params.n_ctx:
        params = replace(params, n_batch=params.n_ctx)  # llama-embedding: n_batch >= n_ctx
    model, ctx = load_context(a, params)
    if not ctx.cparams.causal_attn:  # llama-embedding: a non-causal model's ubatch is the batch (no KV cache to size)
        ctx.cparams = replace(ctx.cparams, n_ubatch=ctx.cparams.n_batch)
    e = Embedder(ctx, a.pooling, a.embd_normalize)
    if e.pooling == "rank":
        prompts = [rank_prompt(model, t, a.cls_separator) for t in prompts]
    seqs = [model.tokenize(t, True, True) for t in prompts]
    res = e.embed_tokens(seqs)
    vecs = [row for r in res for row in (r.embedding if e.pooling == "none" else [r.embedding])]
    print_embeddings(vecs, prompts, a.embd_output_format, a.embd_normalize, e.pooling)
    return 0


def rank_prompt(model, line: str, sep: str) -> str:
    """llama-embedding's rank line "query<sep>document": the GGUF's tokenizer.chat_template.rerank
    with {query} and {document} filled in (Qwen3-Reranker), else the parts joined by the EOS and
    SEP texts the vocabulary adds (bert: query[SEP]document); a line without sep as it is."""
    if not sep or sep not in line:
        return line
    parts = line.split(sep)
    template = model.gguf.get("tokenizer.chat_template.rerank")
    if isinstance(template, str):
        return template.replace("{query}", parts[0]).replace("{document}", parts[1] if len(parts) > 1 else "")
    v = model.tokenizer.vocab
    eos, sep_id = v.special.get("eos"), v.special.get("sep")
    add_sep = bool(model.gguf.get("tokenizer.ggml.add_sep_token", v.model == "bert"))  # llama_vocab: WPM adds [SEP]
    glue = (v.tokens[eos] if v.add_eos and eos is not None else "") + (v.tokens[sep_id] if add_sep and sep_id is not None else "")
    return glue.join(parts)


def _fmt(x: float, normalize: int) -> str:
    return f"{x:1.0f}" if normalize == 0 else f"{x:1.7f}"


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b) / (na * nb) if na and nb else 0.0


def print_embeddings(vecs: list[np.ndarray], prompts: list[str], fmt: str, normalize: int, pooling: str, out=None) -> None:
    """llama-embedding's output formats, to `out` (stdout)."""
    out = out or sys.stdout
    if fmt in ("json", "json+", "array"):
        rows = ["[" + ",".join(_fmt(float(x), normalize) for x in v) + "]" for v in vecs]
        if fmt == "array":
            print("[" + ",".join(rows) + "]", file=out)
            return
        data = ",\n".join(f'    {{\n      "object": "embedding",\n      "index": {j},\n      "embedding": {r}\n    }}'
                          for j, r in enumerate(rows))
        text = '{\n  "object": "list",\n  "data": [\n' + data + "\n  ]"
        if fmt == "json+" and len(vecs) > 1:
            sims = ",\n".join("    [" + ", ".join(f"{_cos(a, b):6.2f}" for b in vecs) + " ]" for a in vecs)
            text += ',\n  "cosineSimilarity": [\n' + sims + "\n  ]"
        print(text + "\n}", file=out)
        return
    if fmt == "raw":
        for v in vecs:
            print(" ".join(_fmt(float(x), normalize) for x in v), file=out)
        return
    if pooling == "rank":
        for j, v in enumerate(vecs):
            print(f"rerank score {j}: {float(v[0]):8.3f}", file=out)
        return
    cell = (lambda x: f"{x:6.0f} ") if normalize == 0 else (lambda x: f"{x:9.6f} ")
    for j, v in enumerate(vecs):
        shown = v if len(vecs) == 1 else v[: min(16, len(v))]
        print(f"embedding {j}: " + "".join(cell(float(x)) for x in shown), file=out)
    if len(vecs) > 1 and pooling != "none":
        print("\ncosine similarity matrix:\n", file=out)
        print("".join(f"{p[:6]:>6.6s} " for p in prompts), file=out)
        for p, a_ in zip(prompts, vecs):
            print("".join(f"{_cos(a_, b):6.2f} " for b in vecs) + p[:10], file=out)
