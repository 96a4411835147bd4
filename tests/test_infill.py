"""/infill (server/http_infill.py): llama-server's format_prompt_infill layout on a tiny model
whose vocabulary has FIM tokens (found by their text, as llama.cpp does), the completion equal
to /completion's on the same tokens, and llama-server's errors (501 without FIM tokens)."""
from __future__ import annotations

import pytest

from llamapy import Model

from server_harness import asgi_call, serving_state
from tiny_model import write_tiny_llama

FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_repo|>", "<|file_sep|>")


@pytest.fixture(scope="module")
def fim_model(tmp_path_factory) -> Model:
    return Model.load(write_tiny_llama(tmp_path_factory.mktemp("fim") / "fim.gguf", extra_control=FIM))


def test_prompt_layout_is_llama_servers(fim_model: Model) -> None:
    from llamapy.server.http_infill import infill_request

    m = fim_model
    pre, suf, mid, rep, sep = (m.tokenizer.vocab.token_to_id[t] for t in FIM)
    assert m.tokenizer.vocab.special["fim_pre"] == pre and m.tokenizer.vocab.special["fim_sep"] == sep
    t = lambda s: m.tokenize(s, add_special=False, parse_special=False)  # noqa: E731
    with serving_state(m) as st:
        req = infill_request(st, {"input_prefix": "def f(x):\n    return ", "input_suffix": "\n\nprint(f(2))\n",
                                  "input_extra": [{"filename": "a.py", "text": "x = 1\n"}], "prompt": "x"})
    assert req.prompt == [rep, *t("myproject\n"), sep, *t("a.py\n"), *t("x = 1\n"), sep, *t("filename\n"),
                          pre, *t("def f(x):\n    return "), *t("x"), suf, *t("\n\nprint(f(2))\n"), mid]


def test_infill_completes_as_completion_on_the_same_tokens(fim_model: Model) -> None:
    from llamapy.server.http_infill import infill_request

    body = {"input_prefix": "the ", "input_suffix": " in", "n_predict": 6, "temperature": 0.0}
    with serving_state(fim_model) as st:
        r = asgi_call(st, "POST", "/infill", json=body)
        assert r.status_code == 200, r.text
        ids = infill_request(st, body).prompt
        c = asgi_call(st, "POST", "/completion", json={"prompt": ids, "n_predict": 6, "temperature": 0.0})
    assert r.json()["content"] == c.json()["content"] and r.json()["tokens_evaluated"] == len(ids)


def test_infill_errors(fim_model: Model, tiny) -> None:
    with serving_state(fim_model) as st:
        r = asgi_call(st, "POST", "/infill", json={"input_prefix": "a"})
        assert r.status_code == 400 and r.json()["error"]["message"] == "\"input_suffix\" is required"
        r = asgi_call(st, "POST", "/infill", json={"input_prefix": "a", "input_suffix": "b", "input_extra": [{"x": 1}]})
        assert r.status_code == 400 and "must contain a \"text\" field" in r.json()["error"]["message"]
    with serving_state(tiny) as st:
        r = asgi_call(st, "POST", "/infill", json={"input_prefix": "a", "input_suffix": "b"})
        assert r.status_code == 501
        assert r.json()["error"]["message"] == ("Infill is not supported by this model: prefix token is missing. "
                                                "suffix token is missing. middle token is missing. ")
