"""Special tokens of a GGUF vocab, the way llama.cpp's llama_vocab::load finds them.

load_vocab reads the `tokenizer.*` keys into a Vocab: llama.cpp's per-type defaults (SPM:
bos 1, eos 2, unk 0, add_bos, add_space_prefix; BPE: bos = eos = 11, clean_spaces), the
pre type's flags, the GGUF's own ids and add_bos/add_eos/add_space_prefix, then the
text-based detection of EOT/EOM/FIM ids, "unused" tokens, the end-of-generation set and
the per-model LSTRIP/RSTRIP attributes.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..gguf.reader import GGUFFile
from .hashorder import unordered_map_order_of
from .vocab import TYPE_TO_ATTR, K, TokenAttr, TokenIndex, TokenTexts, TokenType, Vocab, read_field

# llama.cpp's text lists (llama-vocab.cpp, "auto-detect special tokens by text").
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
             "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
             "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
FIM_TEXTS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                "▁<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                "▁<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                "▁<MID>", "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
})
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
_TYPE_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "llama": dict(bos=1, eos=2, unk=0, add_space_prefix=True, clean_spaces=False, add_bos=True),
    "gpt2": dict(bos=11, eos=11, add_space_prefix=False, clean_spaces=True),
    "gemma4": dict(add_space_prefix=False, clean_spaces=True),
    # WPM: llama.cpp always adds [CLS] (bos) and [SEP] when add_special
    "bert": dict(bos=101, unk=100, sep=102, pad=0, mask=103, add_space_prefix=False, clean_spaces=False,
                 add_bos=True),
})



def load_vocab(f: GGUFFile, pre_flags: dict[str, Any] | None = None,
               whole: bool = True) -> tuple[Vocab, list[str] | None, dict[str, int] | None]:
    """llama_vocab::load for the "gpt2", "llama", "gemma4" and "bert" tokenizer models.

    `pre_flags` are the BPE pre-type's overrides (add_bos, clean_spaces, ...), applied before
    the GGUF's own add_bos/add_eos/add_space_prefix keys, as llama.cpp does.  Returns the
    Vocab, and when `whole` (the whole model will be built) the decoded texts and a text -> id
    dict (llama.cpp's token_to_id: the last id wins) for the builder, both transient: the
    Vocab keeps no per-token objects (its token_to_id ends as a TokenIndex)."""
    model = str(read_field(f, K.MODEL, "") or "")
    defaults = _TYPE_DEFAULTS.get(model)
    if defaults is None:
        raise ValueError(f"tokenizer.ggml.model = {model!r} is not supported "
                         f"(supported: {sorted(_TYPE_DEFAULTS)})")
    strings = f.strings(K.LIST)
    if strings is None or len(strings) == 0:
        raise ValueError("GGUF has no tokenizer.ggml.tokens: cannot build a tokenizer")
    tokens = TokenTexts(strings)
    n = len(tokens)
    scores = f.array(K.SCORES)
    scores = np.zeros(n, dtype=np.float32) if scores is None else scores.astype(np.float32, copy=False)
    types = f.array(K.TOKEN_TYPE)
    if len(scores) < n or (types is not None and len(types) < n):
        raise ValueError(f"scores ({len(scores)}) / token types ({0 if types is None else len(types)}) "
                         f"shorter than the vocabulary ({n})")
    attrs = np.full(n, int(TokenAttr.NORMAL), dtype=np.int32) if types is None else _type_attrs(types[:n])
    flags = {**defaults, **(pre_flags or {})}
    special: dict[str, int | None] = {name: None for name, _ in _SPECIAL_KEYS}
    for name in ("bos", "eos", "unk", "sep", "pad", "mask"):
        special[name] = flags.get(name)
    for name, key in _SPECIAL_KEYS:
        if special[name] is not None and special[name] >= n:
            special[name] = None
        v = read_field(f, key)
        if v is not None and 0 <= int(v) < n:
            special[name] = int(v)
    add_bos = bool(read_field(f, K.ADD_BOS, flags.get("add_bos", False)))
    texts = tokens.tolist() if whole else None
    t2i = dict(zip(texts, range(n))) if texts is not None else None
    vocab = Vocab(
        model=model, pre=str(read_field(f, K.PRE, "default") or "default"),
        tokens=tokens, scores=scores[:n], attrs=attrs, merges=f.strings(K.MERGES),
        special=special, add_bos=add_bos,
        add_eos=bool(read_field(f, K.ADD_EOS, flags.get("add_eos", False))),
        add_space_prefix=bool(read_field(f, K.ADD_PREFIX, flags["add_space_prefix"])),
        clean_spaces=bool(flags["clean_spaces"]),
        chat_template=read_field(f, K.CHAT_TEMPLATE),
        token_to_id=t2i if t2i is not None else TokenIndex(tokens))
    text_of = texts.__getitem__ if texts is not None else tokens.__getitem__
    _detect_specials(vocab, text_of)
    _model_token_attrs(vocab, f)
    vocab.special_texts = {i: text_of(i) for i in vocab.special_cache}
    return vocab, texts, t2i


def _type_attrs(types: np.ndarray) -> np.ndarray:
    """token types -> TokenAttr bits (types outside 0..6 are UNDEFINED), one int32 array."""
    lut = np.array([int(TYPE_TO_ATTR.get(TokenType(t), TokenAttr.UNDEFINED)) for t in range(7)], dtype=np.int32)
    t = np.asarray(types).astype(np.int64)
    ok = (t >= 0) & (t <= 6)
    return np.where(ok, lut[np.where(ok, t, 0)], 0).astype(np.int32)


def _mark_control(vocab: Vocab, tid: int) -> None:
    vocab.attrs[tid] |= TokenAttr.CONTROL


def _map_order_rank(vocab: Vocab) -> dict[int, int]:
    """id -> position in llama.cpp's token_to_id iteration (the raw token bytes hashed, an
    empty token as its "[EMPTY_i]" text, as llama.cpp stores them)."""
    index = vocab.token_to_id if isinstance(vocab.token_to_id, TokenIndex) else TokenIndex(vocab.tokens)
    return {tid: k for k, tid in enumerate(unordered_map_order_of(index.hashes))}


def _detect_specials(vocab: Vocab, text_of: Callable[[int], str]) -> None:
    """The text-based detection of EOT/EOM/FIM ids, unused tokens and the EOG set.

    llama.cpp walks its token_to_id unordered_map and takes the first match, so when several
    texts match (SmolLM2 has both <|im_end|> and <|endoftext|>) we replay libstdc++'s
    iteration order (hashorder.py) to make the same pick.  text_of(id): the token's
    text (from the decoded list when there is one)."""
    sp, t2i = vocab.special, vocab.token_to_id
    rank: dict[int, int] | None = None
    for name, texts in (("eot", EOT_TEXTS), ("eom", EOM_TEXTS), *FIM_TEXTS.items()):
        found = [t2i[t] for t in texts if t in t2i]
        if sp[name] is not None or not found:
            continue
        if len(found) > 1 and rank is None:
            rank = _map_order_rank(vocab)
        sp[name] = min(found, key=rank.__getitem__) if len(found) > 1 else found[0]
        _mark_control(vocab, sp[name])
    control = np.nonzero(vocab.attrs & int(TokenAttr.CONTROL))[0].tolist()
    vocab.attrs[[tid for tid in control if "unused" in text_of(tid)]] |= int(TokenAttr.UNUSED)
    eog = {sp[k] for k in ("fim_pad", "fim_rep", "fim_sep") if sp[k] is not None}
    for text in EOG_TEXTS:
        if text in t2i:
            eog.add(t2i[text])
            _mark_control(vocab, t2i[text])
    eog |= {sp[k] for k in ("eos", "eot", "eom") if sp[k] is not None}
    texts = {text_of(i): i for i in eog}
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
    cache = np.nonzero(vocab.attrs & mask)[0].tolist()
    cache.sort(key=lambda i: -len(text_of(i).encode("utf-8")))
    vocab.special_cache = cache


def _model_token_attrs(vocab: Vocab, f: GGUFFile) -> None:
    """llama.cpp's per-model LSTRIP/RSTRIP attributes ("Handle per token attributes"),
    set after the special-token cache is built: Phi-3 specials swallow the whitespace
    after them; a few BERT-style vocabs' mask token the whitespace before it."""
    t2i = vocab.token_to_id
    name = str(read_field(f, "general.name", "") or "").lower()
    arch = str(read_field(f, "general.architecture", "") or "")

    def setattr_(text: str, attr: TokenAttr, on: bool) -> None:
        if text in t2i:
            i = t2i[text]
            vocab.attrs[i] = (vocab.attrs[i] | attr) if on else (vocab.attrs[i] & ~attr)

    if any(p in vocab.pre for p in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) \
            or any(a in arch for a in ("nomic-bert-moe", "jina-bert-v3")):
        setattr_("<mask>", TokenAttr.LSTRIP, True)
    elif "phi-3" in name or "phi3" in name:
        for i in vocab.special_cache:
            vocab.attrs[i] |= TokenAttr.RSTRIP
        setattr_("</s>", TokenAttr.RSTRIP, True)
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            setattr_(text, TokenAttr.RSTRIP, False)
    elif "modern-bert" in name:
        setattr_("[MASK]", TokenAttr.LSTRIP, True)
