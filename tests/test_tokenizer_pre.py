"""BPE pre types checked against llama.cpp's own source (llama-vocab.cpp from the
llama-cpp-python sdist, tests/llamacpp_vocabs.py): gpt-4o (gpt-oss; no test vocab has it)
and deepseek-llm carry exactly llama.cpp's regex list, and the pipeline's split of sample
texts is the split llama.cpp's regex makes (and, for gpt-4o, tokenizer.json's original
\\p{Lu}/\\p{Ll} regex, which llama.cpp's adaptation stands for)."""
from __future__ import annotations

import regex
import pytest

from llamacpp_vocabs import pre_type_regexes, vocab_dir
from llamapy.tokenizer.bpe import PRE_TYPES, build_bpe, byte_decoder

TEXTS = ["Hello world", "I'm HTTPServer's CEO, don't STOP'LL", "1234567 numbers 12",
         "  multiple   spaces\n\n\tand tabs  ", "Ünïcödé Straße ΑΒΓ αβγ Ωmega", "path/to/file\r\n//x",
         "camelCaseWord XMLHttpRequest iPhone", "naïve café — “quotes” 😀!!", "日本語のテキスト 中文 한국어"]


def regex_split(patterns: tuple[str, ...] | list[str], text: str) -> list[str]:
    """llama.cpp's unicode_regex_split: each regex splits every piece the previous one left,
    keeping both the matches and the text between them."""
    pieces = [text]
    for pat in patterns:
        out: list[str] = []
        for p in pieces:
            pos = 0
            for m in regex.finditer(pat, p):
                if m.start() > pos:
                    out.append(p[pos:m.start()])
                if m.end() > m.start():
                    out.append(m.group())
                pos = m.end()
            if pos < len(p):
                out.append(p[pos:])
        pieces = out
    return pieces


def pipeline_split(pre: str, text: str) -> list[str]:
    """The pieces llamapy's `tokenizers` pipeline for `pre` hands to the BPE model."""
    dec = byte_decoder()
    hf = build_bpe(PRE_TYPES[pre], {}, [])
    return [bytes(dec[c] for c in piece).decode("utf-8") for piece, _ in hf.pre_tokenizer.pre_tokenize_str(text)]


@pytest.mark.parametrize("pre, case", [("gpt-4o", "GPT4O"), ("deepseek-llm", "DEEPSEEK_LLM")])
def test_pre_type_is_llamacpp_regex_and_split(pre: str, case: str) -> None:
    exprs, original = pre_type_regexes(vocab_dir() / "llama-vocab.cpp", case)
    assert PRE_TYPES[pre].regexes == exprs
    for text in TEXTS:
        assert pipeline_split(pre, text) == regex_split(exprs, text), text
        if original:  # gpt-4o: tokenizer.json's regex splits these texts the same way
            assert regex_split(original, text) == regex_split(exprs, text), text
