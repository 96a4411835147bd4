"""Every llama.cpp tokenizer test vocabulary (models/ggml-vocab-*.gguf that has .inp/.out),
every case, through llamapy's Tokenizer as test-tokenizer-0.cpp calls llama.cpp:
common_tokenize(ctx, text, add_special=false, parse_special=false); ids must match exactly.

The files come from the llama-cpp-python sdist on PyPI (tests/llamacpp_vocabs.py, fetched
once into $LLAMAPY_HOME); if PyPI cannot be reached the test fails, it does not skip."""
from __future__ import annotations

from pathlib import Path

import pytest

from llamacpp_vocabs import read_cases, vocab_dir
from llamapy.tokenizer import Tokenizer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vocabs() -> Path:
    return vocab_dir()


def _names(folder: Path) -> list[str]:
    return sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in folder.glob("ggml-vocab-*.gguf")
                  if Path(f"{p}.inp").exists() and Path(f"{p}.out").exists())


def test_every_llamacpp_vocab_case(vocabs: Path, tmp_path: Path) -> None:
    names = _names(vocabs)
    assert len(names) >= 15, f"expected llama.cpp's ~16 tested vocabs in {vocabs}, found {names}"
    report: list[str] = []
    failures: list[str] = []
    for name in names:
        gguf = vocabs / f"ggml-vocab-{name}.gguf"
        cases = read_cases(gguf)
        try:
            tok = Tokenizer.from_gguf(gguf, cache=tmp_path / "tok")
        except Exception as e:          # a vocab that does not load fails all its cases
            report.append(f"{name}: 0/{len(cases)} (load: {e})")
            failures.append(f"{name}: load failed: {e}")
            continue
        ok = 0
        for text, want in cases:
            got = tok.tokenize(text, add_special=False, parse_special=False)
            if got == want:
                ok += 1
            elif sum(f.startswith(f"{name}:") for f in failures) < 3:
                failures.append(f"{name}: {text[:60]!r}: want {want[:20]} got {got[:20]}")
        report.append(f"{name}: {ok}/{len(cases)}")
    print("\nllama.cpp vocab cases passing:\n  " + "\n  ".join(report))
    assert not failures, "\n".join(report + ["first mismatches:"] + failures)
