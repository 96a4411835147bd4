"""tokenizer_subset.py: a tokenizer built for given texts only (the `tokenize` command's)
gives llama.cpp's ids on them, exactly as the whole model does, and refuses other texts."""
from __future__ import annotations

import pytest

from llamapy.tokenizer import Tokenizer
from test_tokenizer import _TOY_FLAGS, _ref, _write_toy_gguf


def _check(path, entries) -> None:
    texts = [e["text"] for e in entries]
    for tok in [Tokenizer.from_gguf(path, only_for=texts)] + [Tokenizer.from_gguf(path, only_for=[t]) for t in texts[:3]]:
        for e in entries:
            if e["text"] not in tok.only_for:
                continue
            got = tok.tokenize(e["text"], add_special=e["add_special"], parse_special=e["parse_special"])
            assert got == e["ids"], e["name"]
    assert len(tok.hf.get_vocab()) < 4096  # a few tokens, not the vocabulary


@pytest.mark.parametrize("which", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)])
def test_subset_equals_llamacpp_on_real_vocabularies(which, smollm2_path, gemma3_path):
    _check(smollm2_path if which == "smollm2" else gemma3_path, _ref(which)["entries"])


@pytest.mark.parametrize("tag,variant", list(_TOY_FLAGS), ids=lambda x: str(x))
def test_subset_equals_llamacpp_on_toy_vocabularies(tmp_path, tag, variant):
    data = _ref(tag)
    ref = next(v for v in data["variants"] if variant in (v["name"], v["pre"]))
    _check(_write_toy_gguf(tmp_path / "toy.gguf", data["toy"], ref["name"], ref["pre"]), ref["entries"])


def test_subset_refuses_other_texts(smollm2_path):
    tok = Tokenizer.from_gguf(smollm2_path, only_for=["Hello world"])
    assert tok.tokenize("Hello world") == Tokenizer.from_gguf(smollm2_path).tokenize("Hello world")
    with pytest.raises(ValueError, match="only_for"):
        tok.tokenize("Hello")
