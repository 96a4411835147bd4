"""`llamapy serve --embedding` (server/http_embed.py, embed_jobs.py): /v1/embeddings through the
official openai client (float and base64) and /embedding's native shape, against llama-embedding's
vectors for the tiny BERT (tests/data/ref_embeddings); 16 mixed-length texts in one request
share one decode and equal each text alone; llama-server's errors."""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from llamapy.params import ContextParams
from llamapy.server.settings import ServeSettings
from llamapy.server.startup import load_model, server_state

import httpx
from server_harness import asgi_call, serving_state, uvicorn_server
from tiny_bert import write_tiny_bert

REF = json.loads((Path(__file__).parent / "data/ref_embeddings/bert-mean.json").read_text())
TEXTS16 = ["the cat", "hello world, this is a test of a longer text that goes on and on.", "a", "dog runs fast",
           "quick brown fox jumps over the lazy dog " * 3, "search", "text model", "the mat!", "x y z", "embedding",
           "on the mat the cat sat", "is this a test?", "fast fox", "brown", "lazy dogs jump over it " * 2, "hello"]


def _cos(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _state(path: Path, n_batch: int = 2048, **kw):
    s = ServeSettings(ctx=ContextParams(n_ctx=2048, n_batch=n_batch, n_ubatch=n_batch, device="cpu"), model=str(path),
                      embedding=True, alias="tiny-bert", **kw)
    state = server_state(s)
    load_model(s, state)
    return state


@pytest.fixture(scope="module")
def bert_path(tmp_path_factory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny_bert.gguf")


@pytest.fixture(scope="module")
def state(bert_path: Path):
    st = _state(bert_path)
    yield st
    st.scheduler.stop(join=True, timeout=30)


def test_openai_client_float_and_base64(state) -> None:
    openai = pytest.importorskip("openai", reason="the official openai client is not installed in this venv")
    with uvicorn_server(state) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none")
        r = client.embeddings.create(model="tiny-bert", input=REF["texts"])
        rb = client.embeddings.create(model="tiny-bert", input=REF["texts"], encoding_format="base64")
    assert [d.index for d in r.data] == list(range(len(REF["texts"])))
    for d, ref in zip(r.data, REF["embeddings"]):
        assert _cos(d.embedding, ref) >= 0.9999
    n_tok = sum(len(state.model.tokenize(t, True, True)) for t in REF["texts"])
    assert r.usage.prompt_tokens == n_tok == r.usage.total_tokens
    for d, db in zip(r.data, rb.data):  # the client decodes base64 itself: the same float32 vector
        got = db.embedding if isinstance(db.embedding, list) else np.frombuffer(base64.b64decode(db.embedding), "<f4")
        assert np.array_equal(np.asarray(got, dtype=np.float32), np.asarray(d.embedding, dtype=np.float32))


def test_native_shape_token_ids_and_raw_base64(state) -> None:
    ids = state.model.tokenize(REF["texts"][1], True, True)
    r = asgi_call(state, "POST", "/embedding", json={"content": REF["texts"][1]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body) == 1 and body[0]["index"] == 0 and len(body[0]["embedding"]) == 1  # [[...]]: one pooled row
    assert _cos(body[0]["embedding"][0], REF["embeddings"][1]) >= 0.9999
    r2 = asgi_call(state, "POST", "/v1/embeddings", json={"input": ids, "encoding_format": "base64"})
    d = r2.json()["data"][0]
    assert d["encoding_format"] == "base64" and d["object"] == "embedding"
    v = np.frombuffer(base64.b64decode(d["embedding"]), "<f4")
    assert _cos(v, REF["embeddings"][1]) >= 0.9999
    assert r2.json()["usage"] == {"prompt_tokens": len(ids), "total_tokens": len(ids)}


def test_sixteen_texts_one_decode_equal_each_alone(state) -> None:
    stats = state.ctx.stats
    n0 = stats.n_decode_calls
    r = asgi_call(state, "POST", "/v1/embeddings", json={"input": TEXTS16})
    assert r.status_code == 200, r.text
    assert stats.n_decode_calls - n0 == 1  # 16 sequences, one batch
    batched = [d["embedding"] for d in r.json()["data"]]
    for i in (0, 1, 4, 15):
        alone = asgi_call(state, "POST", "/v1/embeddings", json={"input": TEXTS16[i]}).json()["data"][0]["embedding"]
        assert _cos(alone, batched[i]) >= 0.99999, f"text {i}"


def test_errors_as_llama_server(state) -> None:
    r = asgi_call(state, "POST", "/v1/embeddings", json={"foo": 1})
    assert r.status_code == 400 and r.json()["error"]["message"] == "\"input\" or \"content\" must be provided"
    r = asgi_call(state, "POST", "/v1/embeddings", json={"input": "x", "encoding_format": "hex"})
    assert r.status_code == 400 and "either float or base64" in r.json()["error"]["message"]
    r = asgi_call(state, "POST", "/v1/embeddings", json={"input": "cat " * 200})  # 202 tokens, 128 positions
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("input 0 has 202 tokens, more than the model's 128 learned positions "
                                            "(n_ctx_train): shorten the input")
    r = asgi_call(state, "POST", "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    assert r.status_code == 501 and "--embeddings" in r.json()["error"]["message"]


def test_pooling_none_is_not_oai_compatible(bert_path: Path) -> None:
    st = _state(bert_path, n_batch=16, pooling="none")
    try:
        r = asgi_call(st, "POST", "/embedding", json={"content": "cat " * 20})
        assert r.status_code == 500
        assert r.json()["error"]["message"] == ("input (22 tokens) is too large to process. increase the physical batch "
                                                "size (current batch size: 16; -ub and -b)")
        r = asgi_call(st, "POST", "/v1/embeddings", json={"input": "the cat"})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "Pooling type 'none' is not OAI compatible. Please use a different pooling type"
        r = asgi_call(st, "POST", "/embedding", json={"content": "the cat"})
        assert len(r.json()[0]["embedding"]) == 4  # [CLS] the cat [SEP]: one row per token
    finally:
        st.scheduler.stop(join=True, timeout=30)


def test_without_embedding_flag_the_routes_answer_501(tiny) -> None:
    with serving_state(tiny) as st:
        for path in ("/embedding", "/embeddings", "/v1/embeddings"):
            r = asgi_call(st, "POST", path, json={"input": "hi"})
            assert r.status_code == 501
            assert r.json()["error"] == {"message": "This server does not support embeddings. Start it with `--embeddings`",
                                         "type": "not_supported_error", "code": 501}


def test_answers_match_llama_servers(state) -> None:
    """The exchanges scripts/ref_server_embeddings.py recorded from llama-server --embedding on
    the same file: the same shapes, usage, and vectors (cosine >= 0.9999)."""
    ref = json.loads((Path(__file__).parent / "data/ref_embeddings/server-bert.json").read_text())
    assert hashlib.sha256(Path(state.model.path).read_bytes()).hexdigest() == ref["sha256"]
    for x in ref["exchanges"]:
        got = asgi_call(state, "POST", x["route"], json=x["request"]).json()
        want = x["response"]
        if x["route"] == "/v1/embeddings":
            assert set(got) == set(want) and got["usage"] == want["usage"] and got["object"] == want["object"]
            pairs = [(g["embedding"], w["embedding"]) for g, w in zip(got["data"], want["data"])]
            assert [set(g) for g in got["data"]] == [set(w) for w in want["data"]]
        else:
            assert [set(g) for g in got] == [set(w) for w in want]
            pairs = [(g["embedding"][0], w["embedding"][0]) for g, w in zip(got, want)]
        assert len(pairs) == len(x["response"]["data"] if isinstance(want, dict) else want)
        for g, w in pairs:
            assert _cos(g, w) >= 0.9999


def test_embedding_counted_in_metrics(bert_path: Path) -> None:
    """llama.cpp's test_metrics_embedding_prompt_is_counted: an embedding's prompt tokens and its
    decode count in /metrics (prompt_tokens_total, n_decode_total); no token is predicted."""
    st = _state(bert_path, metrics=True)
    try:
        with uvicorn_server(st) as url:
            assert httpx.post(url + "/v1/embeddings", json={"input": ["hello world", "goodbye world"]}).status_code == 200
            text = httpx.get(url + "/metrics").text
        m = {ln.split(" ")[0]: float(ln.split(" ")[1]) for ln in text.splitlines() if ln.startswith("llamacpp:")}
        n = sum(len(st.model.tokenize(t, add_special=True, parse_special=True)) for t in ("hello world", "goodbye world"))
        assert m["llamacpp:prompt_tokens_total"] == n and m["llamacpp:n_decode_total"] >= 1
        assert m["llamacpp:tokens_predicted_total"] == 0
    finally:
        st.scheduler.stop(join=True, timeout=30)
