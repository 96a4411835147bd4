"""llamapy.Llama(embedding=True): llama-cpp-python's embed / create_embedding shapes and
semantics (unnormalised unless normalize=True, a str gives one vector, pooling none gives
per-token vectors, truncate, return_count), checked against llama-embedding's vectors for
the tiny BERT (tests/data/ref_embeddings); a Llama that embeds still generates."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llamapy import Llama

from tiny_bert import write_tiny_bert

REF = Path(__file__).parent / "data/ref_embeddings"


def _cos(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def bert_path(tmp_path_factory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny_bert.gguf")


def test_create_embedding_shape_and_values(bert_path: Path) -> None:
    ref = json.loads((REF / "bert-mean.json").read_text())
    llm = Llama(str(bert_path), n_ctx=128, embedding=True, verbose=False)
    out = llm.create_embedding(ref["texts"])
    assert set(out) == {"object", "data", "model", "usage"} and out["object"] == "list"
    assert out["model"] == str(bert_path)
    assert [d["index"] for d in out["data"]] == list(range(len(ref["texts"])))
    assert all(d["object"] == "embedding" and isinstance(d["embedding"][0], float) for d in out["data"])
    n_tok = sum(len(llm.tokenize(t.encode())) for t in ref["texts"])
    assert out["usage"] == {"prompt_tokens": n_tok, "total_tokens": n_tok}
    for d, r in zip(out["data"], ref["embeddings"]):
        assert _cos(d["embedding"], r) >= 0.9999
        assert abs(np.linalg.norm(d["embedding"]) - 1.0) > 1e-3  # llama-cpp-python: not normalised
    one = llm.embed(ref["texts"][0], normalize=True)
    assert isinstance(one[0], float) and abs(np.linalg.norm(one) - 1.0) < 1e-5
    assert np.allclose(one, ref["embeddings"][0], atol=2e-4)
    vecs, n = llm.embed(ref["texts"][:2], return_count=True)
    assert len(vecs) == 2 and n == sum(len(llm.tokenize(t.encode())) for t in ref["texts"][:2])
    assert llm.pooling_type() == 1


def test_pooling_none_gives_per_token_vectors_and_truncate(bert_path: Path) -> None:
    llm = Llama(str(bert_path), n_ctx=128, n_batch=8, n_ubatch=8, embedding=True, pooling_type=0, verbose=False)
    toks = llm.tokenize(b"the cat sat")
    rows = llm.embed("the cat sat")
    assert len(rows) == len(toks) and len(rows[0]) == llm.n_embd()
    long = "the cat sat on the mat " * 3
    assert len(llm.embed(long)) == 8  # truncated to what a batch holds
    with pytest.raises(ValueError, match="more than n_ubatch"):
        llm.embed(long, truncate=False)


def test_embed_needs_embedding_true(tiny_path) -> None:
    llm = Llama(str(tiny_path), n_ctx=256, verbose=False)
    with pytest.raises(RuntimeError, match="embedding=True"):
        llm.embed("hi")


def test_a_decoder_llama_embeds_and_still_generates(tiny_path) -> None:
    llm = Llama(str(tiny_path), n_ctx=256, embedding=True, pooling_type=3, verbose=False)
    a = llm.create_completion("the", max_tokens=4, temperature=0.0)["choices"][0]["text"]
    v = llm.embed("the cat", normalize=True)
    assert len(v) == llm.n_embd() and llm.pooling_type() == 3
    assert llm.create_completion("the", max_tokens=4, temperature=0.0)["choices"][0]["text"] == a
    assert np.allclose(llm.embed("the cat", normalize=True), v, atol=1e-6)
