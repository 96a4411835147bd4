"""Building a Tokenizer's parts from a GGUF: the Vocab (special.load_vocab) and
the derived tables (cache.py) at load; the `tokenizers` model from them when a
text needs it: the whole model (every token and merge: ~1 s for Gemma 3's 262k tokens and
515k merges, ~0.15 s for SmolLM2's 49k), or a model for the words at hand only
(subset.py: milliseconds).  Tokenizer decides which (ModelChooser)."""
from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

from ..gguf.reader import GGUFFile
from .bpe import GEMMA4, PreType, bpe_merge_ids, build_bpe, byte_decoder, pre_type
from .cache import VocabTables, cached_tables
from .special import load_vocab
from .spm import build_spm, byte_token, spm_tables
from .subset import subset, whole
from .vocab import K, Vocab, read_field
from .wpm import WpmOptions

SUBSET_MAX_CHARS = 16384  # a longer text always gets the whole model
WHOLE_SECONDS_PER_ENTRY = 1.5e-6  # the whole model's build time per token and per merge (measured)


@dataclass(slots=True)
class ModelParts:
    """What a `tokenizers` model is built from: the Vocab, its derived tables, the BPE pre
    type (None: SPM), and SPM's phantom id -> byte token ids."""

    vocab: Vocab
    tables: VocabTables
    pre: PreType | None
    spell: dict[int, tuple[int, ...]]
    cache_status: str  # cache.py: "loaded", "built" or "uncached"
    wpm: WpmOptions | None = None  # "bert": WordPiece's options (no `tokenizers` model then)

    def whole(self) -> HFTokenizer:
        """Every token, merge and phantom (the transient lists and dicts are freed after)."""
        with gc_paused():  # ~1M short-lived tuples and strings: no collection passes over them
            texts = self.vocab.tokens.tolist()
            bpe_vocab, merges = whole(texts, dict(zip(texts, range(len(texts)))), self.tables)
            del texts
            hf = self._model(bpe_vocab, merges)
            del bpe_vocab, merges
        release_heap()
        return hf

    def for_words(self, words: list[str]) -> HFTokenizer:
        """A model exact on these words (what the model is handed: SPM-escaped fragments, or
        raw fragments for BPE) and nothing else."""
        byte_level = None
        if self.pre is not None and self.pre.byte_encode:
            byte_level = {b: ch for ch, b in byte_decoder().items()}
        extra: list[str] = []  # SPM, raw-character BPE: the byte tokens (and unk), whatever the text
        if byte_level is None:
            extra = [f"<0x{b:02X}>" for b in range(256)]
        if self.pre is None and self.vocab.special.get("unk") is not None:
            extra.append(self.vocab.tokens[self.vocab.special["unk"]])
        bpe_vocab, merges = subset(self.vocab, self.tables, words, byte_level, extra)
        return self._model(bpe_vocab, merges)

    def _model(self, bpe_vocab: dict[str, int], merges: list[tuple[str, str]]) -> HFTokenizer:
        if self.pre is not None:
            return build_bpe(self.pre, bpe_vocab, merges)
        return build_spm(self.vocab, bpe_vocab, merges)

    def whole_seconds(self) -> float:
        """About what whole() costs on this kind of machine."""
        return WHOLE_SECONDS_PER_ENTRY * (self.vocab.n_vocab + len(self.tables.merges))


def load_parts(f: GGUFFile, cache: Path | None) -> ModelParts:
    """The Vocab and the derived tables of f's vocabulary, nothing per token in Python."""
    model = str(read_field(f, K.MODEL, "") or "")
    if model not in ("gpt2", "llama", "gemma4", "bert"):
        raise ValueError(f"tokenizer.ggml.model = {model!r} is not supported (supported: 'gpt2' "
                         "byte-level BPE, 'llama' SentencePiece, 'gemma4' SPM-style BPE, 'bert' WordPiece)")
    pt = GEMMA4 if model == "gemma4" else pre_type(read_field(f, K.PRE)) if model == "gpt2" else None
    vocab, _, _ = load_vocab(f, pre_flags=pt.flags() if pt else None, whole=False)
    if pt is not None and pt.force_add_bos:
        vocab.add_bos = True

    def derive() -> VocabTables:
        with gc_paused():
            texts = vocab.tokens.tolist()
            ids = dict(zip(texts, range(len(texts))))
            if pt is not None:
                return VocabTables(bpe_merge_ids(vocab.merges.tolist() if vocab.merges else [], ids), [])
            return VocabTables(*spm_tables(vocab, texts, ids))

    if model == "bert":  # WordPiece looks tokens up directly: no merges, no `tokenizers` model
        lowercase = bool(read_field(f, "tokenizer.ggml.normalizer.lowercase", True))
        wpm = WpmOptions(lowercase, bool(read_field(f, "tokenizer.ggml.normalizer.strip_accents", lowercase)),
                         int(vocab.tokens.strings.lengths.max(initial=1)))
        return ModelParts(vocab, VocabTables(np.zeros((0, 2), dtype=np.int32), []), None, {}, "uncached", wpm)
    tables, how = cached_tables(f, vocab.n_vocab, derive, cache)
    spell: dict[int, tuple[int, ...]] = {}
    if pt is None and tables.phantoms:
        byte_ids = [byte_token(vocab, b) for b in range(256)]
        n = vocab.n_vocab
        spell = {n + k: tuple(byte_ids[b] for b in ch.encode("utf-8")) for k, ch in enumerate(tables.phantoms)}
    return ModelParts(vocab, tables, pt, spell, how)


@dataclass(slots=True)
class ModelChooser:
    """Which model encodes a call's words.  Until the whole model exists, a short call gets a
    model for its words only, as long as the time spent on those stays under what the whole
    model costs (the ski-rental rule: at most twice the better choice's time); then, or for a
    long text, the whole model is built once and kept."""

    parts: ModelParts
    whole_after: float | None = None  # seconds of per-call models before the whole one (None: its cost)
    whole_model: HFTokenizer | None = None
    subset_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def whole(self) -> HFTokenizer:
        with self.lock:
            if self.whole_model is None:
                self.whole_model = self.parts.whole()
            return self.whole_model

    def for_words(self, words: list[str]) -> HFTokenizer:
        if self.whole_model is not None:
            return self.whole_model
        budget = self.parts.whole_seconds() if self.whole_after is None else self.whole_after
        if sum(len(w) for w in words) <= SUBSET_MAX_CHARS and self.subset_seconds < budget:
            t0 = time.perf_counter()
            model = self.parts.for_words(words)
            self.subset_seconds += time.perf_counter() - t0
            return model
        return self.whole()


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
