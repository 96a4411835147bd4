"""llama-server's logit_bias on a real server: the request's biases change what is sampled, and
/completion's generation_settings lists them as llama-server's format_logit_bias writes them
(ignore_eos' end-of-generation bans included, -inf as null), as the suite's test_ignore_eos reads."""
from __future__ import annotations

import httpx
import pytest
from server_harness import serving_state, uvicorn_server


@pytest.fixture(scope="module")
def url(tiny):
    with serving_state(tiny, n_ctx=512, np_=2, n_batch=64) as st, uvicorn_server(st) as u:
        yield u, st


def _complete(url: str, **kw) -> dict:
    r = httpx.post(url + "/completion", json={"prompt": "a b c", "n_predict": 3, "temperature": 0.0} | kw, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _first_token(url: str, **kw) -> int:
    return _complete(url, n_probs=1, **kw)["completion_probabilities"][0]["id"]


def test_ignore_eos_lists_the_eog_bans(url):
    u, st = url
    g = _complete(u, ignore_eos=True)["generation_settings"]
    eog = sorted(st.model.tokenizer.vocab.eog_ids)
    assert eog and [e["token"] for e in g["logit_bias"]] == eog
    assert all(e["bias"] is None for e in g["logit_bias"])  # -inf, as null
    assert g["ignore_eos"] is True and g["min_keep"] == 0
    assert _complete(u, ignore_eos=False)["generation_settings"]["logit_bias"] == []


def test_logit_bias_changes_the_sampled_token(url):
    u, st = url
    greedy = _first_token(u)
    assert _first_token(u, logit_bias=[[greedy, False]]) != greedy  # banned
    other = (greedy + 7) % st.model.n_vocab
    body = _complete(u, n_probs=1, logit_bias={str(other): 100})  # object form, id as a string key
    assert body["completion_probabilities"][0]["id"] == other
    assert body["generation_settings"]["logit_bias"] == [{"bias": 100.0, "token": other}]
    # ids outside the vocabulary are skipped, as llama-server skips them
    assert _complete(u, logit_bias=[[st.model.n_vocab, 5], [-1, 5]])["generation_settings"]["logit_bias"] == []


def test_logit_bias_on_the_openai_route(url):
    u, st = url
    r = httpx.post(u + "/v1/completions", json={"prompt": "a b c", "max_tokens": 1, "temperature": 0.0, "logprobs": 1}, timeout=60)
    greedy_text = r.json()["choices"][0]["text"]
    greedy = _first_token(u)
    r = httpx.post(u + "/v1/completions", json={"prompt": "a b c", "max_tokens": 1, "temperature": 0.0,
                                                "logit_bias": {str(greedy): -100}}, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] != greedy_text
