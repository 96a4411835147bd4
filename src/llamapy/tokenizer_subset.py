"""The `tokenizers` model's vocabulary and merges, whole or only what given texts can use.

A BPE merge joins two adjacent symbols of one word into a symbol that is a substring of that
word, so on a known text only the tokens that are substrings of the words the model sees
(with the characters and byte tokens a word starts from) and the merges among them can ever
apply; keeping those, in the same rank order, gives the same ids as the whole model.  The
`tokenize` command builds that small model (Tokenizer.from_gguf(..., only_for=[text])): a
few milliseconds instead of the whole vocabulary's (0.6 s for Gemma 3's 262k tokens).

The words the model sees: the raw fragments Vocab.partition leaves (with and without
parse_special), SPM-escaped with and without the space prefix, or byte-level mapped (BPE)."""
from __future__ import annotations

import numpy as np

from .tokenizer_cache import VocabTables
from .tokenizer_hashorder import hash_bytes_many
from .tokenizer_spm import SPACE, merge_pairs
from .tokenizer_vocab import Vocab


def whole(texts: list[str], t2i: dict[str, int], tables: VocabTables) -> tuple[dict[str, int], list[tuple[str, str]], dict[int, str]]:
    """The whole model: every token, every merge, every phantom (SPM)."""
    n = len(texts)
    phantoms = {n + k: ch for k, ch in enumerate(tables.phantoms)}
    for i, ch in phantoms.items():
        t2i[ch] = i
    return t2i, merge_pairs(tables.merges, texts + tables.phantoms), phantoms


def words(vocab: Vocab, texts: list[str], byte_level: dict[int, str] | None) -> list[str]:
    """Every word the model can be handed while tokenizing `texts` (any flags)."""
    out: set[str] = set()
    for text in texts:
        for parse_special in (False, True):
            for frag in vocab.partition(text, parse_special):
                if not isinstance(frag, str):
                    continue
                if byte_level is None:
                    out.update((frag.replace(" ", SPACE), (" " + frag).replace(" ", SPACE)))
                else:
                    out.add("".join(byte_level[b] for b in frag.encode("utf-8")))
    return sorted(out)


def substring_ids(vocab: Vocab, word: str, max_bytes: int) -> set[int]:
    """Ids of the tokens that occur in `word` (all its substrings of up to max_bytes bytes,
    hashed at once and looked up in the vocabulary's hash index)."""
    b = word.encode("utf-8")
    cuts = np.array([i for i in range(len(b)) if (b[i] & 0xC0) != 0x80] + [len(b)], dtype=np.int64)
    i, j = np.triu_indices(len(cuts), 1)
    starts, lengths = cuts[i], cuts[j] - cuts[i]
    keep = lengths <= max_bytes
    hashes = np.unique(hash_bytes_many(b, starts[keep], lengths[keep]))
    index = vocab.token_to_id
    return {int(t) for t in index.ids_of_hashes(hashes) if index.raw(int(t)) in b}


def subset(vocab: Vocab, tables: VocabTables, texts: list[str], byte_level: dict[int, str] | None,
           extra: list[str]) -> tuple[dict[str, int], list[tuple[str, str]], dict[int, str]]:
    """The model for `texts` only: (vocabulary, ranked merges, phantoms) as whole() gives them,
    restricted to the tokens inside the words of the texts, plus the `extra` token texts (byte
    tokens, unk) the model needs whatever the text."""
    n = vocab.n_vocab
    max_bytes = int(vocab.tokens.strings.lengths.max(initial=1))
    ws = words(vocab, texts, byte_level)
    ids: set[int] = set()
    for w in ws:
        ids |= substring_ids(vocab, w, max_bytes)
    ids |= {i for i in (vocab.token_to_id.get(t) for t in extra) if i is not None}
    chars = {c for w in ws for c in w}
    phantoms = {n + k: ch for k, ch in enumerate(tables.phantoms) if ch in chars}
    text_of = {i: vocab.tokens[i] for i in sorted(ids)}
    text_of.update(phantoms)
    allowed = np.array(sorted(text_of), dtype=np.int64)
    m = tables.merges
    rows = m[np.isin(m[:, 0], allowed) & np.isin(m[:, 1], allowed)].tolist()
    results = {text_of[i] for i in ids}
    merges = [(text_of[a], text_of[b]) for a, b in rows if text_of[a] + text_of[b] in results]
    bpe_vocab = {t: i for i, t in text_of.items()}  # ascending ids: a duplicated text keeps its last id
    return bpe_vocab, merges, phantoms
