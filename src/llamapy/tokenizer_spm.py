"""SentencePiece-style vocabularies (`tokenizer.ggml.model == "llama"`, e.g. Gemma 3).

llama.cpp's llm_tokenizer_spm is a bigram merge: start from UTF-8 characters, repeatedly
join the adjacent pair whose concatenation is a vocabulary token with the highest score
(ties: leftmost), and spell any leftover symbol that is not a token as <0xNN> byte tokens.
That is exactly a `tokenizers` BPE model whose merges are every split (a, b) of every
token t = a + b with both halves in the vocabulary, ranked by t's score, best first, with
byte fallback on. Spaces become U+2581 ("▁") before the merge, which Tokenizer does.

transformers' GGUF converter ranks Gemma's merges by file position instead of score; for
Gemma 3's file the two orders are the same for normal tokens (scores fall by 1 per id).
"""
from __future__ import annotations

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from .tokenizer_vocab import Vocab

SPACE = "\u2581"  # ▁


def spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Every (a, b) with a, b and a+b all tokens, best score of a+b first (then lower id)."""
    t2i, scores = vocab.token_to_id, vocab.scores
    ranked: list[tuple[float, int, str, str]] = []
    for tid, text in enumerate(vocab.tokens):
        if len(text) < 2:
            continue
        for i in range(1, len(text)):
            a = text[:i]
            if a in t2i:
                b = text[i:]
                if b in t2i:
                    ranked.append((-scores[tid], tid, a, b))
    ranked.sort()
    return [(a, b) for _, _, a, b in ranked]


def build_spm(vocab: Vocab) -> HFTokenizer:
    """A `tokenizers` BPE model equivalent to llama.cpp's SPM bigram merge.

    No normalizer or pre-tokenizer: Tokenizer hands it one raw fragment at a time with
    spaces already escaped to ▁, so the whole fragment is merged as one word, as in
    llama.cpp's llm_tokenizer_spm_session."""
    unk = vocab.special.get("unk")
    model = models.BPE(vocab=dict(vocab.token_to_id), merges=spm_merges(vocab),
                       byte_fallback=True, fuse_unk=False,
                       unk_token=vocab.tokens[unk] if unk is not None else None)
    return HFTokenizer(model)
