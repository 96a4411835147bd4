"""llama_vocab's data: token texts, scores and attributes, special ids and flags.

What every tokenizer type shares, filled in by tokenizer_special.load_vocab, plus
`partition()` — llama.cpp's tokenizer_st_partition, which cuts special tokens out of the
text before the model-specific tokenizer (BPE or SPM) runs on the remaining raw fragments.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from pathlib import Path
from types import MappingProxyType
from typing import Any

import gguf

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

def open_reader(src: Any) -> gguf.GGUFReader:
    """A GGUFReader from a path, a GGUFReader, or anything holding one as `.reader`."""
    if isinstance(src, gguf.GGUFReader):
        return src
    if isinstance(getattr(src, "reader", None), gguf.GGUFReader):
        return src.reader
    path = Path(src)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer source not found: {path}")
    return gguf.GGUFReader(str(path), "r")


def read_field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    """One metadata value: scalars as Python values, arrays as lists; default if absent."""
    f = reader.fields.get(key)
    if f is None:
        return default
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", errors="replace") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    return f.contents()


_C_SPACE = " \t\n\v\f\r"  # C isspace()


@dataclass(slots=True)
class Vocab:
    model: str                       # tokenizer.ggml.model: "gpt2" (BPE) or "llama" (SPM)
    pre: str                         # tokenizer.ggml.pre ("default" when absent)
    tokens: list[str]
    scores: list[float]
    attrs: list[TokenAttr]
    merges: list[str]
    special: dict[str, int | None]   # bos, eos, eot, eom, unk, sep, pad, mask, fim_*
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    clean_spaces: bool
    chat_template: str | None
    token_to_id: dict[str, int] = field(default_factory=dict)
    eog_ids: frozenset[int] = frozenset()
    special_cache: list[int] = field(default_factory=list)  # longest text first

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def partition(self, text: str, parse_special: bool) -> list[str | int]:
        """tokenizer_st_partition: split `text` into raw fragments (str) and special tokens (int).

        Special tokens are matched longest first; control/unknown tokens only when
        parse_special, user-defined tokens always (llama.cpp, like HF, matches them before
        the model runs). Non-overlapping, left to right, within the still-raw fragments."""
        frags: list[str | int] = [text] if text else []
        for tid in self.special_cache:
            attr = self.attrs[tid]
            if not parse_special and attr & (TokenAttr.CONTROL | TokenAttr.UNKNOWN):
                continue
            needle = self.tokens[tid]
            if not any(isinstance(f, str) and needle in f for f in frags):
                continue
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
        needle, attr = self.tokens[tid], self.attrs[tid]
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
