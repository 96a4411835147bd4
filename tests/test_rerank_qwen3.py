"""Qwen3-Reranker's scoring as llama.cpp does it (build_pooling's rank on qwen3): the last
token's hidden state through cls.output (the converter's lm_head rows of "yes" and "no"), a
softmax, the score being P("yes"); the prompt is the GGUF's tokenizer.chat_template.rerank.
Checked against llama-server --reranking on a tiny qwen3 written the same way
(tests/tiny_family.py rerank_head, tests/data/ref_embeddings/server-qwen3-rerank.json made by
scripts/ref_server_embeddings.py)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from llamapy.server.settings import ServeSettings
from llamapy.server.startup import load_model, server_state
from llamapy.params import ContextParams

from server_harness import asgi_call
from tiny_family import QWEN3_RERANK_TEMPLATE, write_tiny_family

REF = json.loads((Path(__file__).parent / "data/ref_embeddings/server-qwen3-rerank.json").read_text())
TOL = 5e-3  # scores are probabilities; F16 weights, llama.cpp's F16 activations in the matmuls


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    p = write_tiny_family(tmp_path_factory.mktemp("q3r") / "tiny_qwen3_rerank.gguf", "qwen3", rerank_head=True)
    assert hashlib.sha256(p.read_bytes()).hexdigest() == REF["sha256"], "tiny_family.py no longer writes the reference's file"
    s = ServeSettings(ctx=ContextParams(n_ctx=8192, n_batch=2048, n_ubatch=512, device="cpu"), model=str(p),
                      embedding=True, pooling=None, alias="tiny-qwen3-rerank")
    st = server_state(s)
    load_model(s, st)
    yield st
    st.scheduler.stop(join=True, timeout=30)


def test_qwen3_rerank_matches_llama_server(state) -> None:
    """Same usage (so the same prompt tokens: the rerank template), the same order and top_n,
    scores within TOL; the pooling came from the GGUF (rank)."""
    assert state.pooling == "rank"
    for x in REF["exchanges"]:
        got, want = asgi_call(state, "POST", x["route"], json=x["request"]).json(), x["response"]
        assert got["usage"] == want["usage"], (got, want)
        gs = [r["relevance_score"] for r in got["results"]]
        ws = [r["relevance_score"] for r in want["results"]]
        assert [r["index"] for r in got["results"]] == [r["index"] for r in want["results"]], (gs, ws)
        assert np.max(np.abs(np.array(gs) - ws)) <= TOL, (gs, ws)


def test_qwen3_rerank_prompt_is_the_template(state) -> None:
    from llamapy.server.http_rerank import rerank_tokens

    m = state.model
    toks = rerank_tokens(state, "q?", "doc")
    want = QWEN3_RERANK_TEMPLATE.replace("{query}", "q?").replace("{document}", "doc")
    assert toks == m.tokenize(want, add_special=False, parse_special=True)
    assert toks[0] == m.tokenize("<|im_start|>", add_special=False, parse_special=True)[0]  # a control token, parsed


def test_qwen3_rank_lines_match_llama_embedding(state) -> None:
    """llama-embedding --pooling rank on "query<TAB>document" lines (the CLI's rank_prompt: the
    rerank template filled in): both outputs, P(yes) and P(no), within TOL of llama.cpp's."""
    from llamapy.cli.embedding import rank_prompt
    from llamapy.context import Context
    from llamapy.embed import Embedder

    ref = json.loads((Path(__file__).parent / "data/ref_embeddings/qwen3-rank.json").read_text())
    assert ref["sha256"] == REF["sha256"]
    m = state.model
    e = Embedder(Context(m, ContextParams(n_ctx=4096, n_batch=2048, n_ubatch=512, n_seq_max=8, kv_unified=True)), None, -1)
    assert e.pooling == "rank"
    out = e.embed_tokens([m.tokenize(rank_prompt(m, t, "\t"), True, True) for t in ref["texts"]])
    got = np.array([o.embedding for o in out])  # [n_texts, 2]
    assert np.max(np.abs(got - np.array(ref["embeddings"]))) <= TOL, (got, ref["embeddings"])
