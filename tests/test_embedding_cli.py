"""`llamapy embedding` (cli/embedding.py) against llama-embedding's own output for the tiny BERT
(tests/data/ref_embeddings, scripts/ref_embeddings.py): the same texts through the command
line, array and json formats, separator, and -ub below a text refused with the numbers."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llamapy.cli.main import main

from tiny_bert import write_tiny_bert

REF = Path(__file__).parent / "data/ref_embeddings"


@pytest.fixture(scope="module")
def bert_path(tmp_path_factory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny_bert.gguf")


@pytest.mark.parametrize("case", ["bert-mean", "bert-cls", "bert-mean-maxabs"])
def test_cli_array_matches_llama_embedding(bert_path: Path, case: str, capsys) -> None:
    ref = json.loads((REF / f"{case}.json").read_text())
    rc = main(["embedding", "-m", str(bert_path), "-p", "\n".join(ref["texts"]), "--pooling", ref["pooling"],
               "--embd-normalize", str(ref["normalize"]), "--embd-output-format", "array"])
    assert rc == 0
    got = json.loads(capsys.readouterr().out)
    assert len(got) == len(ref["embeddings"])
    for g, r in zip(got, ref["embeddings"]):
        g, r = np.asarray(g), np.asarray(r)
        assert g @ r / (np.linalg.norm(g) * np.linalg.norm(r)) >= 0.9999


def test_cli_json_and_separator(bert_path: Path, capsys) -> None:
    ref = json.loads((REF / "bert-mean.json").read_text())
    rc = main(["embedding", "-m", str(bert_path), "-p", "<#sep#>".join(ref["texts"][:2]), "--embd-separator", "<#sep#>",
               "--embd-output-format", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["object"] == "list" and [d["index"] for d in doc["data"]] == [0, 1]
    for d, r in zip(doc["data"], ref["embeddings"]):
        assert d["object"] == "embedding"
        assert np.allclose(d["embedding"], r, atol=2e-4)


def test_cli_text_longer_than_the_batch_is_refused(bert_path: Path, capsys) -> None:
    rc = main(["embedding", "-m", str(bert_path), "-p", "the cat sat on the mat " * 4, "-b", "8", "-c", "8"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "error: input 0 has 26 tokens, more than n_ubatch (-ub 8)" in err and "at least 26" in err, err
