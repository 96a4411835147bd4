"""tokenizer/subset.py / tokenizer/build.py: a model built for a call's words only gives
llama.cpp's ids, exactly as the whole model does; a tokenizer uses such models until their
cost reaches the whole model's, then builds the whole one."""
from __future__ import annotations

import pytest

from llamapy.tokenizer import Tokenizer
from llamapy.tokenizer.build import SUBSET_MAX_CHARS
from test_tokenizer import _TOY_FLAGS, _ref, _write_toy_gguf


def _check(path, entries, whole_after: float) -> Tokenizer:
    tok = Tokenizer.from_gguf(path)
    tok.models.whole_after = whole_after
    for e in entries:
        got = tok.tokenize(e["text"], add_special=e["add_special"], parse_special=e["parse_special"])
        assert got == e["ids"], e["name"]
    return tok


@pytest.mark.parametrize("which", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)])
def test_per_call_models_equal_llamacpp_on_real_vocabularies(which, smollm2_path, gemma3_path):
    entries = [e for e in _ref(which)["entries"] if len(e["text"]) <= SUBSET_MAX_CHARS]
    tok = _check(smollm2_path if which == "smollm2" else gemma3_path, entries, float("inf"))
    assert tok.models.whole_model is None  # every call had its own small model


@pytest.mark.parametrize("tag,variant", list(_TOY_FLAGS), ids=lambda x: str(x))
def test_per_call_models_equal_llamacpp_on_toy_vocabularies(tmp_path, tag, variant):
    data = _ref(tag)
    ref = next(v for v in data["variants"] if variant in (v["name"], v["pre"]))
    path = _write_toy_gguf(tmp_path / "toy.gguf", data["toy"], ref["name"], ref["pre"])
    assert _check(path, ref["entries"], float("inf")).models.whole_model is None


def test_a_small_model_holds_a_few_tokens(smollm2_path):
    tok = Tokenizer.from_gguf(smollm2_path)
    small = tok.models.parts.for_words(["Hello world"])
    assert len(small.get_vocab()) < 512 and small.encode("Hello world").ids == tok.hf.encode("Hello world").ids


def test_whole_model_after_the_budget_or_for_a_long_text(smollm2_path):
    tok = Tokenizer.from_gguf(smollm2_path)
    tok.models.whole_after = 0.0  # no budget: the first call builds the whole model
    tok.tokenize("Hello")
    assert tok.models.whole_model is not None
    tok = Tokenizer.from_gguf(smollm2_path)
    tok.tokenize("word " * (SUBSET_MAX_CHARS // 5 + 1))
    assert tok.models.whole_model is not None
    tok = Tokenizer.from_gguf(smollm2_path)
    for _ in range(3):
        tok.tokenize("Hello world")
    assert tok.models.whole_model is None and tok.models.subset_seconds > 0


@pytest.mark.parametrize("which", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)])
def test_whole_model_equals_llamacpp(which, smollm2_path, gemma3_path):
    tok = _check(smollm2_path if which == "smollm2" else gemma3_path, _ref(which)["entries"], 0.0)
    assert tok.models.whole_model is not None and tok.models.subset_seconds == 0.0
