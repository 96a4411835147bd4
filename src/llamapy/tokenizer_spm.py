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

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from .tokenizer_vocab import Vocab

SPACE = "\u2581"  # ▁


def phantom_chars(vocab: Vocab) -> list[str]:
    """Characters that occur inside tokens but are not tokens themselves, sorted."""
    t2i = vocab.token_to_id
    return sorted({c for t in vocab.tokens if len(t) > 1 for c in t if c not in t2i})


def spm_merges(vocab: Vocab, phantoms: set[str]) -> list[tuple[str, str]]:
    """Every (a, b) with a+b a token and a, b tokens or phantom characters, best score of
    a+b first (then lower id)."""
    t2i, scores = vocab.token_to_id, vocab.scores
    ranked: list[tuple[float, int, str, str]] = []
    for tid, text in enumerate(vocab.tokens):
        if len(text) < 2:
            continue
        for i in range(1, len(text)):
            a = text[:i]
            if a in t2i or a in phantoms:
                b = text[i:]
                if b in t2i or b in phantoms:
                    ranked.append((-scores[tid], tid, a, b))
    ranked.sort()
    return [(a, b) for _, _, a, b in ranked]


def byte_token(vocab: Vocab, byte: int) -> int:
    """llama.cpp's byte_to_token for SPM: the <0xNN> token (unk when the vocab lacks it)."""
    tid = vocab.token_to_id.get(f"<0x{byte:02X}>")
    if tid is None:
        unk = vocab.special.get("unk")
        if unk is None:
            raise ValueError(f"vocab has no <0x{byte:02X}> byte token and no unk token")
        return unk
    return tid


def build_spm(vocab: Vocab) -> tuple[HFTokenizer, dict[int, tuple[int, ...]]]:
    """A `tokenizers` BPE model equivalent to llama.cpp's SPM bigram merge, and the map
    phantom id -> byte token ids.

    No normalizer or pre-tokenizer: Tokenizer hands it one raw fragment at a time with
    spaces already escaped to ▁, so the whole fragment is merged as one word, as in
    llama.cpp's llm_tokenizer_spm_session."""
    phantoms = phantom_chars(vocab)
    bpe_vocab = dict(vocab.token_to_id)
    spell: dict[int, tuple[int, ...]] = {}
    for k, ch in enumerate(phantoms):
        bpe_vocab[ch] = vocab.n_vocab + k
        spell[vocab.n_vocab + k] = tuple(byte_token(vocab, b) for b in ch.encode("utf-8"))
    unk = vocab.special.get("unk")
    model = models.BPE(vocab=bpe_vocab, merges=spm_merges(vocab, set(phantoms)),
                       byte_fallback=True, fuse_unk=False,
                       unk_token=vocab.tokens[unk] if unk is not None else None)
    return HFTokenizer(model), spell
