"""llama_vocab: the `tokenizer.*` GGUF metadata, read the way llama.cpp's llama_vocab::load does.

Holds what every tokenizer type shares: token texts, scores and attributes, the special ids
(with llama.cpp's per-type defaults, GGUF overrides and text-based EOT/FIM/EOG detection),
the add_bos/add_eos/add_space_prefix/clean_spaces flags, and `partition()` — llama.cpp's
tokenizer_st_partition, which cuts special tokens out of the text before the model-specific
tokenizer (BPE or SPM) runs on the remaining raw fragments.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from pathlib import Path
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


_TYPE_TO_ATTR = {
    TokenType.UNKNOWN: TokenAttr.UNKNOWN, TokenType.UNUSED: TokenAttr.UNUSED,
    TokenType.NORMAL: TokenAttr.NORMAL, TokenType.CONTROL: TokenAttr.CONTROL,
    TokenType.USER_DEFINED: TokenAttr.USER_DEFINED, TokenType.BYTE: TokenAttr.BYTE,
}

# llama.cpp's text lists (llama-vocab.cpp, "auto-detect special tokens by text").
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
             "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
             "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                "▁<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                "▁<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                "▁<MID>", "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["))

# special id name -> GGUF key, in llama.cpp's order (the deprecated prefix/suffix/middle last)
_SPECIAL_KEYS = (("bos", K.BOS_ID), ("eos", K.EOS_ID), ("eot", K.EOT_ID), ("eom", K.EOM_ID),
                 ("unk", K.UNK_ID), ("sep", K.SEP_ID), ("pad", K.PAD_ID), ("mask", K.MASK_ID),
                 ("fim_pre", K.FIM_PRE_ID), ("fim_suf", K.FIM_SUF_ID), ("fim_mid", K.FIM_MID_ID),
                 ("fim_pad", K.FIM_PAD_ID), ("fim_rep", K.FIM_REP_ID), ("fim_sep", K.FIM_SEP_ID),
                 ("fim_pre", K.PREFIX_ID), ("fim_suf", K.SUFFIX_ID), ("fim_mid", K.MIDDLE_ID))

# llama.cpp's defaults per `tokenizer.ggml.model`: special ids and flags
_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(bos=1, eos=2, unk=0, add_space_prefix=True, clean_spaces=False, add_bos=True),
    "gpt2": dict(bos=11, eos=11, add_space_prefix=False, clean_spaces=True),
}


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
                    continue
                parts = f.split(needle)
                for j, part in enumerate(parts):
                    if j:
                        out.append(tid)
                    if part:
                        out.append(part)
            frags = out
        return frags


def load_vocab(reader: gguf.GGUFReader, pre_flags: dict[str, Any] | None = None) -> Vocab:
    """llama_vocab::load for the "gpt2" and "llama" tokenizer models.

    `pre_flags` are the BPE pre-type's overrides (add_bos, clean_spaces, ...), applied before
    the GGUF's own add_bos/add_eos/add_space_prefix keys, as llama.cpp does."""
    model = str(read_field(reader, K.MODEL, "") or "")
    defaults = _TYPE_DEFAULTS.get(model)
    if defaults is None:
        raise ValueError(f"tokenizer.ggml.model = {model!r} is not supported "
                         f"(supported: {sorted(_TYPE_DEFAULTS)})")
    tokens = read_field(reader, K.LIST)
    if not tokens:
        raise ValueError("GGUF has no tokenizer.ggml.tokens: cannot build a tokenizer")
    n = len(tokens)
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    scores = [float(s) for s in read_field(reader, K.SCORES, [0.0] * n)]
    types = read_field(reader, K.TOKEN_TYPE, None)
    if len(scores) < n or (types is not None and len(types) < n):
        raise ValueError(f"scores ({len(scores)}) / token types ({len(types or [])}) "
                         f"shorter than the vocabulary ({n})")
    attrs = [TokenAttr.NORMAL] * n if types is None else \
        [_TYPE_TO_ATTR.get(TokenType(t) if 0 <= t <= 6 else TokenType.UNDEFINED,
                           TokenAttr.UNDEFINED) for t in types[:n]]
    flags = {**defaults, **(pre_flags or {})}
    special: dict[str, int | None] = {name: None for name, _ in _SPECIAL_KEYS}
    for name in ("bos", "eos", "unk"):
        special[name] = flags.get(name)
    for name, key in _SPECIAL_KEYS:
        if special[name] is not None and special[name] >= n:
            special[name] = None
        v = read_field(reader, key)
        if v is not None and 0 <= int(v) < n:
            special[name] = int(v)
    add_bos = bool(read_field(reader, K.ADD_BOS, flags.get("add_bos", False)))
    vocab = Vocab(
        model=model, pre=str(read_field(reader, K.PRE, "default") or "default"),
        tokens=tokens, scores=scores, attrs=attrs, merges=read_field(reader, K.MERGES, []) or [],
        special=special, add_bos=add_bos,
        add_eos=bool(read_field(reader, K.ADD_EOS, flags.get("add_eos", False))),
        add_space_prefix=bool(read_field(reader, K.ADD_PREFIX, flags["add_space_prefix"])),
        clean_spaces=bool(flags["clean_spaces"]),
        chat_template=read_field(reader, K.CHAT_TEMPLATE),
        token_to_id={t: i for i, t in enumerate(tokens)})
    _detect_specials(vocab)
    return vocab


def _mark_control(vocab: Vocab, tid: int) -> None:
    vocab.attrs[tid] |= TokenAttr.CONTROL


def _detect_specials(vocab: Vocab) -> None:
    """The text-based detection of EOT/EOM/FIM ids, unused tokens and the EOG set.

    llama.cpp walks an unordered_map, so when several texts match (SmolLM2 has both
    <|im_end|> and <|endoftext|>) its pick depends on libstdc++'s hashing; we take the
    lowest id, which is what llama.cpp picks for SmolLM2 (the reference test checks the
    ids against llama.cpp's load log)."""
    sp, t2i = vocab.special, vocab.token_to_id
    for name, texts in (("eot", EOT_TEXTS), ("eom", EOM_TEXTS), *FIM_TEXTS.items()):
        found = sorted(t2i[t] for t in texts if t in t2i)
        if sp[name] is None and found:
            sp[name] = found[0]
            _mark_control(vocab, found[0])
    for tid, attr in enumerate(vocab.attrs):
        if attr & TokenAttr.CONTROL and "unused" in vocab.tokens[tid]:
            vocab.attrs[tid] |= TokenAttr.UNUSED
    eog = {sp[k] for k in ("fim_pad", "fim_rep", "fim_sep") if sp[k] is not None}
    for text in EOG_TEXTS:
        if text in t2i:
            eog.add(t2i[text])
            _mark_control(vocab, t2i[text])
    eog |= {sp[k] for k in ("eos", "eot", "eom") if sp[k] is not None}
    texts = {vocab.tokens[i]: i for i in eog}
    if "<|end|>" in texts and (("<|return|>" in texts and ("<|call|>" in texts or "<|calls|>" in texts))
                               or ("<|calls|>" in texts and "<|flush|>" in texts)):
        eog.discard(texts["<|end|>"])
        vocab.attrs[texts["<|end|>"]] = TokenAttr.USER_DEFINED
    for text in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):  # gpt-oss hack
        if text in t2i:
            vocab.attrs[t2i[text]] = TokenAttr.USER_DEFINED
    if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
        eog.discard(texts["</s>"])
        vocab.attrs[texts["</s>"]] = TokenAttr.NORMAL
    vocab.eog_ids = frozenset(eog)
    mask = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
    cache = [i for i, a in enumerate(vocab.attrs) if a & mask]
    cache.sort(key=lambda i: -len(vocab.tokens[i].encode("utf-8")))
    vocab.special_cache = cache
