"""WordPiece (tokenizer/wpm.py) offline, on llama.cpp's rules as llm_tokenizer_wpm_session
states them; the real check is bert-bge's cases in tests/test_llamacpp_vocabs.py."""
from __future__ import annotations

from llamapy.tokenizer.wpm import preprocess, wpm_tokenize


def test_preprocess_splits_and_normalises_as_llamacpp() -> None:
    text = "Héllo,\u00a0世界! a+b\tÄpfel\u200b x\x00y"
    assert preprocess(text, True, True) == ["hello", ",", "世", "界", "!", "a", "+", "b", "apfel", "xy"]
    assert preprocess(text, False, False) == ["Héllo", ",", "世", "界", "!", "a", "+", "b", "Äpfel", "xy"]
    assert preprocess("  \n ", True, True) == []
    assert preprocess("€5 ©", True, True) == ["€5", "©"]   # a non-ASCII symbol stays in its word


def test_greedy_longest_match_and_unk() -> None:
    vocab = {"▁un": 1, "▁unaff": 2, "able": 3, "aff": 4, "▁x": 5, "▁é": 6, "t": 7}
    ids = wpm_tokenize("unaffable unable x xt xq é", vocab.get, max_token_len=8, unk=0, lowercase=False,
                       strip_accents=False)
    # unaffable: ▁unaff + able; unable: ▁un + able; xq: no token at "q" -> the word is one unk
    assert ids == [2, 3, 1, 3, 5, 5, 7, 0, 6]
