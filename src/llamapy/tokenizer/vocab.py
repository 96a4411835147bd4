"""llama_vocab's data: token texts, scores and attributes, special ids and flags.

What every tokenizer type shares, filled in by special.load_vocab, plus
`partition()` — llama.cpp's tokenizer_st_partition, which cuts special tokens out of the
text before the model-specific tokenizer (BPE or SPM) runs on the remaining raw fragments.

Kept compactly: token texts stay in the mapped GGUF (TokenTexts), scores are a numpy view
over it, attributes one int32 array, text -> id a sorted array of hashes (TokenIndex).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from pathlib import Path
from types import MappingProxyType
from typing import Any

import gguf
import numpy as np

from ..gguf.reader import GGUFFile, GGUFStrings
from .hashorder import hash_bytes, hash_bytes_many

K = gguf.Keys.Tokenizer


class TokenType(IntEnum):
    """llama_token_type: the values stored in `tokenizer.ggml.token_type`."""
    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


class TokenAttr(IntFlag):
    """llama_token_attr."""
    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5
    NORMALIZED = 1 << 6
    LSTRIP = 1 << 7
    RSTRIP = 1 << 8
    SINGLE_WORD = 1 << 9


TYPE_TO_ATTR: Mapping[TokenType, TokenAttr] = MappingProxyType({
    TokenType.UNKNOWN: TokenAttr.UNKNOWN, TokenType.UNUSED: TokenAttr.UNUSED,
    TokenType.NORMAL: TokenAttr.NORMAL, TokenType.CONTROL: TokenAttr.CONTROL,
    TokenType.USER_DEFINED: TokenAttr.USER_DEFINED, TokenType.BYTE: TokenAttr.BYTE,
})

def open_gguf(src: Any) -> GGUFFile:
    """The GGUFFile to read a vocabulary from: itself, or opened from a path."""
    if isinstance(src, GGUFFile):
        return src
    path = Path(src)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer source not found: {path}")
    return GGUFFile(path)


def read_field(f: GGUFFile, key: str, default: Any = None) -> Any:
    """One scalar (or small list) metadata value; default if absent."""
    return f.get(key, default)


class TokenTexts(Sequence[str]):
    """The vocabulary's token texts over the mapped file (GGUFStrings), nothing decoded up
    front: texts[i] decodes one token; an empty token reads as "[EMPTY_i]" (llama.cpp)."""

    def __init__(self, strings: GGUFStrings) -> None:
        self.strings = strings
        self.empty = frozenset(np.nonzero(strings.lengths == 0)[0].tolist())

    def __len__(self) -> int:
        return len(self.strings)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return f"[EMPTY_{i}]" if i in self.empty else self.strings[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def tolist(self) -> list[str]:
        """Every text, decoded in one pass (a transient list: the builders' input)."""
        out = self.strings.tolist()
        for i in self.empty:
            out[i] = f"[EMPTY_{i}]"
        return out


class TokenIndex(Mapping[str, int]):
    """text -> id without a Python dict of the vocabulary: each token's std::hash value
    (hashorder's hash of its raw bytes, "[EMPTY_i]" for an empty one: the keys of
    llama.cpp's token_to_id), sorted once, on first use; a lookup hashes the text and
    compares the bytes of the tokens with that hash.  Duplicate texts: the last id wins,
    as in llama.cpp's map."""

    def __init__(self, texts: TokenTexts) -> None:
        self.texts = texts
        self._hashes: np.ndarray | None = None
        self._order: np.ndarray | None = None
        self._by_hash: np.ndarray | None = None

    @property
    def hashes(self) -> np.ndarray:
        """uint64 [n_vocab]: std::hash of every token, by id."""
        if self._hashes is None:
            s = self.texts.strings
            h = hash_bytes_many(s.buf, s.starts, s.lengths)
            for i in self.texts.empty:
                h[i] = hash_bytes(f"[EMPTY_{i}]".encode())
            self._hashes = h
        return self._hashes

    def _sorted(self) -> tuple[np.ndarray, np.ndarray]:
        if self._order is None:
            self._order = np.argsort(self.hashes, kind="stable")
            self._by_hash = self.hashes[self._order]
        return self._order, self._by_hash

    def ids_of_hashes(self, hashes: np.ndarray) -> np.ndarray:
        """Token ids whose hash is among `hashes` (candidates: compare the bytes)."""
        order, by_hash = self._sorted()
        return order[np.isin(by_hash, hashes)]

    def raw(self, i: int) -> bytes:
        return f"[EMPTY_{i}]".encode() if i in self.texts.empty else self.texts.strings.raw(i)

    def get(self, text: str, default: int | None = None) -> int | None:  # type: ignore[override]
        b = text.encode("utf-8")
        order, by_hash = self._sorted()
        h = np.uint64(hash_bytes(b))
        lo, hi = np.searchsorted(by_hash, h, "left"), np.searchsorted(by_hash, h, "right")
        found = [int(i) for i in order[lo:hi] if self.raw(int(i)) == b]
        return max(found) if found else default

    def __getitem__(self, text: str) -> int:
        i = self.get(text)
        if i is None:
            raise KeyError(text)
        return i

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and self.get(text) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(self.texts.tolist()))

    def __len__(self) -> int:
        return len(dict.fromkeys(self.texts.tolist()))


_C_SPACE = " \t\n\v\f\r"  # C isspace()


@dataclass(slots=True)
class Vocab:
    model: str                       # tokenizer.ggml.model: "gpt2" (BPE) or "llama" (SPM)
    pre: str                         # tokenizer.ggml.pre ("default" when absent)
    tokens: TokenTexts
    scores: np.ndarray               # float32 [n_vocab] (a view over the file, or zeros)
    attrs: np.ndarray                # int32 [n_vocab] of TokenAttr bits
    merges: GGUFStrings | None       # BPE: tokenizer.ggml.merges ("a b"), read by the builder
    special: dict[str, int | None]   # bos, eos, eot, eom, unk, sep, pad, mask, fim_*
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    clean_spaces: bool
    chat_template: str | None
    token_to_id: Mapping[str, int] = field(default_factory=dict)
    eog_ids: frozenset[int] = frozenset()
    special_cache: list[int] = field(default_factory=list)  # longest text first
    special_texts: dict[int, str] = field(default_factory=dict)  # the special_cache tokens' texts

    @property
    def space_marked(self) -> bool:
        """Its NORMAL pieces write a space as ▁ (SPM, Gemma 4, WordPiece), not byte-level BPE's Ġ."""
        return self.model in ("llama", "gemma4", "bert")
    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def partition(self, text: str, parse_special: bool) -> list[str | int]:
        """tokenizer_st_partition: split `text` into raw fragments (str) and special tokens (int).

        Special tokens are matched longest first; control/unknown tokens only when
        parse_special, user-defined tokens always (llama.cpp, like HF, matches them before
        the model runs). Non-overlapping, left to right, within the still-raw fragments."""
        frags: list[str | int] = [text] if text else []
        if not frags or not self.special_cache:
            return frags
        # per token one list lookup, one dict lookup and one substring search (Gemma 3 has 6,414
        # special tokens: reading each one's attributes as a numpy scalar and an IntFlag took
        # 6.8 ms a call, the scan itself 1-2 ms)
        skip = ((self.attrs[self.special_cache] & int(TokenAttr.CONTROL | TokenAttr.UNKNOWN)) != 0).tolist() \
            if not parse_special else [False] * len(self.special_cache)
        texts = self.special_texts
        for tid, skipped in zip(self.special_cache, skip):
            if skipped:
                continue
            needle = texts[tid]
            if needle not in text or not any(isinstance(f, str) and needle in f for f in frags):
                continue  # (the raw fragments are pieces of text: one search rules most tokens out)
            out: list[str | int] = []
            for f in frags:
                if isinstance(f, int) or needle not in f:
                    out.append(f)
                else:
                    self._cut(f, tid, out)
            frags = out
        return frags

    def _cut(self, text: str, tid: int, out: list[str | int]) -> None:
        """Every occurrence of token `tid` in `text`, left to right; an LSTRIP token eats the
        whitespace before it, an RSTRIP token the whitespace after it (C isspace)."""
        needle, attr = self.special_texts[tid], int(self.attrs[tid])
        rest, first = text, True
        while True:
            if attr & TokenAttr.RSTRIP and not first:
                rest = rest.lstrip(_C_SPACE)
            k = rest.find(needle)
            if k < 0:
                if rest:
                    out.append(rest)
                return
            left = rest[:k].rstrip(_C_SPACE) if attr & TokenAttr.LSTRIP else rest[:k]
            if left:
                out.append(left)
            out.append(tid)
            rest, first = rest[k + len(needle):], False
