"""Building a Tokenizer's parts from a GGUF: the Vocab (tokenizer_special.load_vocab), the
derived tables (tokenizer_cache.py), and the `tokenizers` model, whole or for given texts
only (tokenizer_subset.py).  Tokenizer.from_gguf is the entry point."""
from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from .gguf.reader import GGUFFile
from .tokenizer_bpe import bpe_merge_ids, build_bpe, byte_decoder, pre_type
from .tokenizer_cache import VocabTables, cached_tables
from .tokenizer_special import load_vocab
from .tokenizer_spm import build_spm, spm_tables
from .tokenizer_subset import subset, whole
from .tokenizer_vocab import K, TokenIndex, Vocab, read_field


@dataclass(slots=True)
class Built:
    vocab: Vocab
    hf: HFTokenizer
    spell: dict[int, tuple[int, ...]]  # SPM phantom id -> byte token ids
    cache_status: str  # tokenizer_cache: "loaded", "built" or "uncached"


def build_tokenizer(f: GGUFFile, cache: Path | None, only_for: list[str] | None) -> Built:
    """The Vocab and the `tokenizers` model of f's vocabulary (only_for: for these texts only)."""
    with gc_paused():  # ~1M short-lived tuples and strings: no collection passes over them
        built = _build(f, cache, only_for)
    release_heap()  # the transient lists and dicts of the build go back to the system
    return built


def _build(f: GGUFFile, cache: Path | None, only_for: list[str] | None) -> Built:
    model = str(read_field(f, K.MODEL, "") or "")
    if model not in ("gpt2", "llama"):
        raise ValueError(f"tokenizer.ggml.model = {model!r} is not supported "
                         "(supported: 'gpt2' byte-level BPE, 'llama' SentencePiece)")
    pt = pre_type(read_field(f, K.PRE)) if model == "gpt2" else None
    vocab, texts, t2i = load_vocab(f, pre_flags=pt.flags() if pt else None, whole=only_for is None)

    def derive() -> VocabTables:
        all_texts = texts if texts is not None else vocab.tokens.tolist()
        ids = t2i if t2i is not None else dict(zip(all_texts, range(len(all_texts))))
        if pt is not None:
            return VocabTables(bpe_merge_ids(vocab.merges.tolist() if vocab.merges else [], ids), [])
        return VocabTables(*spm_tables(vocab, all_texts, ids))

    tables, how = cached_tables(f, vocab.n_vocab, derive, cache)
    index = vocab.token_to_id if isinstance(vocab.token_to_id, TokenIndex) else TokenIndex(vocab.tokens)
    if only_for is None:
        bpe_vocab, merges, phantoms = whole(texts, t2i, tables)
    else:
        byte_level = None if pt is None else {b: ch for ch, b in byte_decoder().items()}
        extra = []  # SPM: the byte tokens and unk, whatever the text
        if pt is None:
            extra = [f"<0x{b:02X}>" for b in range(256)]
            if vocab.special.get("unk") is not None:
                extra.append(vocab.tokens[vocab.special["unk"]])
        bpe_vocab, merges, phantoms = subset(vocab, tables, only_for, byte_level, extra)
    if pt is not None:
        hf, spell = build_bpe(pt, bpe_vocab, merges), {}
    else:
        hf, spell = build_spm(vocab, bpe_vocab, merges, phantoms)
    vocab.token_to_id = index  # the transient dict goes
    return Built(vocab, hf, spell, how)


@contextlib.contextmanager
def gc_paused():
    """No cyclic garbage collection inside (the objects made are acyclic); back on after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def release_heap() -> None:
    """glibc keeps freed small blocks in its arenas; hand them back (malloc_trim), so the
    build's transient objects do not stay in the process's resident set."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass
