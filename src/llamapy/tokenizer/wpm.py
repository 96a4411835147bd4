"""WordPiece (`tokenizer.ggml.model == "bert"`): llama.cpp's llm_tokenizer_wpm_session.

llama.cpp's BERT GGUFs spell a word-initial piece with a leading ▁ ("▁hello") and a
continuation piece bare ("llo", HF's "##llo"), so a word is matched as "▁" + word, greedy
longest match left to right over its UTF-8 bytes; a word with any position that no token
matches becomes one unk.  Before that, preprocess() splits the text into words as llama.cpp
does: optional NFD with accent marks (\\p{M}) dropped, control / NUL / U+FFFD dropped,
whitespace separates, and every punctuation, ASCII symbol and CJK ideograph is a word of its
own; optional lowercasing per codepoint.  lowercase / strip_accents come from
tokenizer.ggml.normalizer.lowercase / .strip_accents, as llama.cpp reads them: lowercase
true when absent, strip_accents then as lowercase.  Written out here rather than as `tokenizers`' WordPiece: that model marks
continuations (##) instead of word starts, caps words at 100 characters and normalises
with its own tables, so its ids would not be llama.cpp's.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

SPACE = "\u2581"
# unicode-data.cpp's unicode_set_whitespace
WHITESPACE = frozenset([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                        0x2028, 0x2029, 0x202F, 0x205F, 0x3000])
# llm_tokenizer_wpm_session::is_chinese_char (0x2B920: llama.cpp's, after HF's rust code)
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


@dataclass(frozen=True, slots=True)
class WpmOptions:
    """llama.cpp's normalizer_opts for a WPM vocab and its longest token (bytes)."""
    lowercase: bool
    strip_accents: bool
    max_token_len: int


def is_chinese_char(cpt: int) -> bool:
    return any(lo <= cpt <= hi for lo, hi in _CJK)


def _lower(ch: str) -> str:
    """unicode_tolower: the simple (one codepoint) lowercase mapping."""
    low = ch.lower()
    return low if len(low) == 1 else low[0]


def preprocess(text: str, lowercase: bool, strip_accents: bool) -> list[str]:
    """llm_tokenizer_wpm_session::preprocess: the text's words (none empty)."""
    if strip_accents:
        text = unicodedata.normalize("NFD", text)
    words: list[str] = []
    cur: list[str] = []
    for ch in text:
        cpt = ord(ch)
        if cpt in WHITESPACE:
            if cur:
                words.append("".join(cur))
                cur = []
            continue
        cat = unicodedata.category(ch)
        if cpt == 0 or cpt == 0xFFFD or (cat[0] == "C" and cat != "Cn"):
            continue
        if strip_accents and cat[0] == "M":
            continue
        s = _lower(ch) if lowercase else ch
        if cat[0] == "P" or (cpt < 0x7F and cat[0] == "S") or is_chinese_char(cpt):
            if cur:
                words.append("".join(cur))
                cur = []
            words.append(s)
        else:
            cur.append(s)
    if cur:
        words.append("".join(cur))
    return words


def wpm_tokenize(text: str, lookup: Callable[[str], int | None], max_token_len: int, unk: int | None,
                 lowercase: bool = False, strip_accents: bool = False) -> list[int]:
    """llm_tokenizer_wpm_session::tokenize on one raw fragment: ids of its words' greedy
    longest matches (`lookup`: token text -> id or None; max_token_len in bytes)."""
    out: list[int] = []
    for word in preprocess(text, lowercase, strip_accents):
        b = (SPACE + word).encode("utf-8")
        n, i = len(b), 0
        ids: list[int] = []
        while i < n:
            for j in range(min(n, i + max_token_len + 1), i, -1):
                try:
                    tid = lookup(b[i:j].decode("utf-8"))
                except UnicodeDecodeError:  # a cut inside a character is no token
                    continue
                if tid is not None:
                    ids.append(tid)
                    i = j
                    break
            else:  # no token at i: the whole word is discarded
                ids = []
                break
        if ids:
            out += ids
        elif unk is not None:
            out.append(unk)
    return out
