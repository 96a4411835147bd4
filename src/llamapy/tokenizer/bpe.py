"""GPT-2-style byte-level BPE (`tokenizer.ggml.model == "gpt2"`) as a `tokenizers` model.

The pre-tokenizer is llama.cpp's, chosen by `tokenizer.ggml.pre` (llama-vocab.cpp maps each
pre name to a pre type, and each pre type to a list of regexes applied one after another,
every regex splitting the pieces the previous one left). The regexes below are llama.cpp's
strings; where llama.cpp runs a hand-written splitter instead of the regex (unicode.cpp's
unicode_regex_split_custom_gpt2 for the GPT-2 pattern) the pattern here carries that
splitter's behaviour, e.g. the trailing `|\\s+` its whitespace fallback implements.

Why transformers' GGUF conversion of SmolLM2 (pre "smollm") disagrees with llama.cpp on
indented prose: it uses GPT-2's single regex, but llama.cpp's smollm pre type first
isolates every `\\p{N}` codepoint and only then applies the GPT-2 regex inside each piece.
A whitespace run in front of a digit therefore ends its piece, and `\\s+(?!\\S)` takes the
whole run ("\\n        1." -> "\\n" + 8 spaces, "1", "."), where GPT-2's regex alone keeps the
last space for the digit ("\\n" + 7 spaces, " 1" -> "Ġ", "1"). Indented numbered lists,
aligned numbers in tables and "x =   5" all show it; so do non-ASCII digits (GPT-2 alone
keeps " ٣" as one piece). (Its `encode` also always parses control-token text such as <|im_start|>,
i.e. llama.cpp's parse_special=True.)
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from tokenizers import Regex
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from ..gguf.header import GGUFError

_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# tekken / gpt-4o: llama.cpp's adaptation of the tokenizer.json regex (no \p{Lu}/\p{Ll}),
# which behaves the same on real text as on llama.cpp's category-collapsed text
_UPPER = r"((?=[\p{L}])([^a-z]))"
_LOWER = r"((?=[\p{L}])([^A-Z]))"
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
         rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"
# deepseek-llm: llama.cpp spells its letters as explicit ranges (no \p{L}), so it runs std::wregex
# on the raw codepoints; `$` ends the piece (each regex sees one piece of the previous split)
_DEEPSEEK_LETTERS = ("A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿ"
                     "ᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨ"
                     "K-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲"
                     "𐳀-𐳲𑢠-𑣟𞤀-𞥃")
DEEPSEEK_LLM = ("[\r\n]", rf"\s?[{_DEEPSEEK_LETTERS}]+", "\\s?[!-/:-~！-／：-～‘-‟\u3000-。]+",
                r"\s+$", "[一-龥ࠀ-一가-\ud7ff]+", r"\p{N}+")


@dataclass(frozen=True, slots=True)
class PreType:
    """One llama.cpp pre type: its regex list and the vocab flags its branch sets."""
    name: str
    regexes: tuple[str, ...]
    clean_spaces: bool = True
    ignore_merges: bool = False
    add_bos: bool | None = None       # None: keep the BPE default (False)
    byte_encode: bool = True          # False: merges over raw UTF-8 characters, <0xXX> byte tokens
    escape_whitespaces: bool = False  # spaces become ▁ before the split (SPM-style BPE)
    force_add_bos: bool = False       # add_bos even when the GGUF says false (llama.cpp's Gemma 4 override)

    def flags(self) -> dict[str, bool]:
        out = {"clean_spaces": self.clean_spaces}
        if self.add_bos is not None:
            out["add_bos"] = self.add_bos
        return out


_DEFAULT = PreType("default", (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))
_GROUPS: tuple[tuple[tuple[str, ...], PreType], ...] = (
    (("default",), _DEFAULT),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      "jina-v5-nano"), PreType("llama3", (LLAMA3,), ignore_merges=True, add_bos=True)),
    (("dbrx", "smaug-bpe", "chatglm-bpe"), PreType("llama3-regex", (LLAMA3,))),
    (("glm4", "glm5"), PreType("chatglm4", (LLAMA3,), ignore_merges=True)),
    (("smollm", "command-r"), PreType("smollm", (r"\p{N}", GPT2), clean_spaces=False)),
    (("starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"),
     PreType("starcoder", (r"\p{N}", GPT2))),
    (("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
      "mellum", "modern-bert", "mpt", "olmo", "jais", "exaone4"), PreType("gpt2", (GPT2,))),
    (("trillion", "granite-docling"), PreType("gpt2", (GPT2,), clean_spaces=False)),
    (("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"),
     PreType("qwen2", (QWEN2,), clean_spaces=False)),
    (("stablelm2", "megrez"), PreType("qwen2", (QWEN2,))),
    (("qwen35",), PreType("qwen35", (QWEN35,), clean_spaces=False)),
    (("falcon",), PreType("falcon", (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"))),
    (("deepseek-llm",), PreType("deepseek-llm", DEEPSEEK_LLM, clean_spaces=False)),
    (("deepseek-coder",), PreType("deepseek-coder", (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+",
                                                     r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"),
                                  clean_spaces=False)),
    (("poro-chat",), PreType("poro", (BLOOM,), clean_spaces=False)),
    (("bloom", "gpt3-finnish"), PreType("bloom", (BLOOM,))),
    (("viking",), PreType("viking", (BLOOM, r"\p{N}"), clean_spaces=False)),
    (("tekken",), PreType("tekken", (TEKKEN,), clean_spaces=False, ignore_merges=True,
                          add_bos=True)),
    (("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"),
     PreType("gpt-4o", (GPT4O,), clean_spaces=False)),
)
# tokenizer.ggml.model = "gemma4": SPM-style BPE (spaces escaped to ▁, merges over the whole
# line on raw UTF-8, newline runs apart); llama.cpp sets this pre type whatever tokenizer.ggml.pre says
GEMMA4 = PreType("gemma4", (r"[^\n]+|[\n]+",), byte_encode=False, escape_whitespaces=True,
                 force_add_bos=True)
PRE_TYPES: Mapping[str, PreType] = MappingProxyType(
    {name: pt for names, pt in _GROUPS for name in names})


def pre_type(pre: str | None) -> PreType:
    """llama.cpp's pre type for a `tokenizer.ggml.pre` value (missing -> "default")."""
    if not pre:
        return _DEFAULT
    pt = PRE_TYPES.get(pre)
    if pt is None:
        raise ValueError(f"unknown pre-tokenizer type: tokenizer.ggml.pre = {pre!r} "
                         f"(supported: {', '.join(sorted(PRE_TYPES))})")
    return pt


def split_merge(merge: str) -> tuple[str, str] | None:
    """A `tokenizer.ggml.merges` entry "a b" split as llama.cpp does: at the first space
    from index 1 (so a first part that is itself a space survives)."""
    pos = merge.find(" ", 1)
    if pos < 0:
        return None
    return merge[:pos], merge[pos + 1:]


def bpe_merge_ids(merges: list[str], t2i: Mapping[str, int]) -> np.ndarray:
    """tokenizer.ggml.merges as id pairs [n_merges, 2] int32, in rank order; every part and
    every joined pair must be a token (llama.cpp asserts the same)."""
    pairs: list[int] = []
    dropped: list[str] = []
    for m in merges:
        pair = split_merge(m)
        if pair is None or pair[0] not in t2i or pair[1] not in t2i or pair[0] + pair[1] not in t2i:
            dropped.append(m)
            continue
        pairs += (t2i[pair[0]], t2i[pair[1]])
    if dropped:
        raise GGUFError(f"{len(dropped)} of {len(merges)} tokenizer.ggml.merges name "
                         f"tokens missing from the vocabulary (first: {dropped[0]!r})")
    return np.array(pairs, dtype=np.int32).reshape(-1, 2)


def build_bpe(pt: PreType, bpe_vocab: dict[str, int], merges: list[tuple[str, str]]) -> HFTokenizer:
    """A `tokenizers` pipeline: llama.cpp's regex list -> byte-level encoding -> ranked merges
    (without byte_encode: merges over the characters, unknown ones as <0xXX> byte tokens).

    Special tokens are not added here: Tokenizer cuts them out first (Vocab.partition), so
    this pipeline only ever sees raw text fragments, as llama.cpp's BPE session does."""
    model = models.BPE(vocab=bpe_vocab, merges=merges, ignore_merges=pt.ignore_merges,
                       byte_fallback=not pt.byte_encode)
    hf = HFTokenizer(model)
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pt.regexes]
    if pt.byte_encode:
        splits.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    hf.pre_tokenizer = pre_tokenizers.Sequence(splits)
    return hf


def byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the byte-level character -> the byte it stands for."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}
