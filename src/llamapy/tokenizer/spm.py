"""SentencePiece-style vocabularies (`tokenizer.ggml.model == "llama"`, e.g. Gemma 3).

llama.cpp's llm_tokenizer_spm is a bigram merge: start from UTF-8 characters, repeatedly
join the adjacent pair whose concatenation is a vocabulary token with the highest score
(ties: leftmost), and spell any leftover symbol that is not a token as <0xNN> byte tokens.
That is a `tokenizers` BPE model whose merges are every split (a, b) of every token
t = a + b, ranked by t's score, best first, with byte fallback on. Spaces become U+2581
("▁") before the merge, which Tokenizer does.

One gap: llama.cpp merges symbols that are single characters even when that character is
no token of its own (a vocabulary can hold "▁H" but not "▁"), while `tokenizers` turns
such a character into bytes before merging. So every character that occurs inside a token
without being one joins the BPE vocabulary as a "phantom" id past n_vocab; a phantom left
unmerged is spelled as byte tokens afterwards, as llama.cpp's resegment does.

transformers' GGUF converter ranks Gemma's merges by file position instead of score; for
Gemma 3's file the two orders agree on normal tokens (scores fall by 1 per id).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from .vocab import Vocab

SPACE = "\u2581"  # ▁


def phantom_chars(texts: list[str], t2i: Mapping[str, int]) -> list[str]:
    """Characters that occur inside tokens but are not tokens themselves, sorted."""
    return sorted({c for t in texts if len(t) > 1 for c in t if c not in t2i})


def spm_tables(vocab: Vocab, texts: list[str], t2i: Mapping[str, int]) -> tuple[np.ndarray, list[str]]:
    """The BPE model's merges as id pairs, and the phantom characters (ids n_vocab + k).

    Every (a, b) with a+b a token and a, b tokens or phantom characters, best score of a+b
    first, then lower id, then shorter a: a Python walk over every split of every token, so
    its result is what cache.py keeps."""
    phantoms = phantom_chars(texts, t2i)
    ids = dict(t2i)
    n = len(texts)
    for k, ch in enumerate(phantoms):
        ids[ch] = n + k
    get = ids.get
    tids: list[int] = []
    pairs: list[int] = []
    for tid, text in enumerate(texts):
        for i in range(1, len(text)):
            a = get(text[:i])
            if a is not None:
                b = get(text[i:])
                if b is not None:
                    tids.append(tid)
                    pairs += (a, b)
    tid_arr = np.array(tids, dtype=np.int64)
    order = np.lexsort((tid_arr, -vocab.scores.astype(np.float64)[tid_arr]))  # stable: splits stay in order
    merges = np.array(pairs, dtype=np.int32).reshape(-1, 2)[order]
    return merges, phantoms


def byte_token(vocab: Vocab, byte: int) -> int:
    """llama.cpp's byte_to_token for SPM: the <0xNN> token (unk when the vocab lacks it)."""
    tid = vocab.token_to_id.get(f"<0x{byte:02X}>")
    if tid is None:
        unk = vocab.special.get("unk")
        if unk is None:
            raise ValueError(f"vocab has no <0x{byte:02X}> byte token and no unk token")
        return unk
    return tid


def build_spm(vocab: Vocab, bpe_vocab: dict[str, int], merges: list[tuple[str, str]]) -> HFTokenizer:
    """A `tokenizers` BPE model equivalent to llama.cpp's SPM bigram merge, from its vocabulary
    (token texts and phantom characters -> ids) and its ranked merges.

    No normalizer or pre-tokenizer: Tokenizer hands it one raw fragment at a time with
    spaces already escaped to ▁, so the whole fragment is merged as one word, as in
    llama.cpp's llm_tokenizer_spm_session."""
    unk = vocab.special.get("unk")
    model = models.BPE(vocab=bpe_vocab, merges=merges, byte_fallback=True, fuse_unk=False,
                       unk_token=vocab.tokens[unk] if unk is not None else None)
    return HFTokenizer(model)


def merge_pairs(merges: np.ndarray, texts: list[str]) -> list[tuple[str, str]]:
    """Merge id pairs -> the (text, text) pairs `tokenizers` takes (C-level loops; the
    texts are shared, not copied)."""
    obj = np.empty(len(texts), dtype=object)
    obj[:] = texts
    return list(zip(obj[merges[:, 0]].tolist(), obj[merges[:, 1]].tolist()))
