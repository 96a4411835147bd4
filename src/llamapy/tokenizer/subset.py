"""The `tokenizers` model's vocabulary and merges: whole, or only what given words can use.

A BPE merge joins two adjacent symbols of one word into a symbol that is a substring of that
word, so on known words only the tokens that are substrings of them (with the characters and
byte tokens a word starts from) and the merges among them can ever apply; keeping those, in
the same rank order, gives the same ids as the whole model.  Building that small model takes
milliseconds, the whole one about a second for Gemma 3's 262k tokens (build.py
decides which to use).  The words: what the model is handed, SPM-escaped fragments, or raw
fragments that the BPE pipeline maps to byte-level characters (mapped here the same way)."""
from __future__ import annotations

import numpy as np

from .cache import VocabTables
from .hashorder import hash_bytes_many
from .spm import merge_pairs
from .vocab import Vocab


def whole(texts: list[str], t2i: dict[str, int], tables: VocabTables) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The whole model: every token, every merge, every phantom (SPM, ids n_vocab + k)."""
    n = len(texts)
    for k, ch in enumerate(tables.phantoms):
        t2i[ch] = n + k
    return t2i, merge_pairs(tables.merges, texts + tables.phantoms)


def substring_ids(vocab: Vocab, word: str, max_bytes: int) -> set[int]:
    """Ids of the tokens that occur in `word` (all its substrings of up to max_bytes bytes,
    hashed at once and looked up in the vocabulary's hash index)."""
    b = word.encode("utf-8")
    cuts = np.array([i for i in range(len(b)) if (b[i] & 0xC0) != 0x80] + [len(b)], dtype=np.int64)
    i, j = np.triu_indices(len(cuts), 1)
    keep = cuts[j] - cuts[i] <= max_bytes
    starts, lengths = cuts[i][keep], (cuts[j] - cuts[i])[keep]
    hashes = np.unique(hash_bytes_many(b, starts, lengths))
    index = vocab.token_to_id
    return {int(t) for t in index.ids_of_hashes(hashes) if index.raw(int(t)) in b}


def subset(vocab: Vocab, tables: VocabTables, words: list[str], byte_level: dict[int, str] | None,
           extra: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The model for these words only: (vocabulary, ranked merges) as whole() gives them,
    restricted to the tokens inside the words, the phantoms among their characters, and the
    `extra` token texts (byte tokens, unk) the model needs whatever the words."""
    if byte_level is not None:
        words = ["".join(byte_level[c] for c in w.encode("utf-8")) for w in words]
    n = vocab.n_vocab
    max_bytes = int(vocab.tokens.strings.lengths.max(initial=1))
    ids: set[int] = set()
    for w in set(words):
        ids |= substring_ids(vocab, w, max_bytes)
    ids |= {i for i in (vocab.token_to_id.get(t) for t in extra) if i is not None}
    chars = {c for w in words for c in w}
    text_of = {i: vocab.tokens[i] for i in sorted(ids)}
    text_of.update({n + k: ch for k, ch in enumerate(tables.phantoms) if ch in chars})
    allowed = np.array(sorted(text_of), dtype=np.int64)
    m = tables.merges
    rows = m[np.isin(m[:, 0], allowed) & np.isin(m[:, 1], allowed)].tolist()
    results = {text_of[i] for i in ids}
    merges = [(text_of[a], text_of[b]) for a, b in rows if text_of[a] + text_of[b] in results]
    return {t: i for i, t in text_of.items()}, merges  # ascending ids: a duplicated text keeps its last id
