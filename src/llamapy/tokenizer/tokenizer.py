"""Tokenizer: llama.cpp's llama_tokenize / llama_detokenize / llama_token_to_piece over a GGUF vocab.

Special tokens are cut out of the text first (Vocab.partition, llama.cpp's
tokenizer_st_partition); each remaining raw fragment goes through a `tokenizers` model built
from the GGUF metadata: byte-level BPE with llama.cpp's pre-tokenizer regexes
(bpe.py; Gemma 4's SPM-style BPE on raw characters too) or the SPM bigram merge expressed
as a scored BPE (spm.py); a BERT vocabulary goes through WordPiece (wpm.py) instead.
That model is built when a text needs it: for a short text, only the part of it the text
can use, until the whole one pays off (build.py), so loading a 262k-token
vocabulary costs no per-token Python work.  Ids are checked against llama.cpp's own
`llama-tokenize` (scripts/ref_tokenize.py).
"""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from tokenizers import Tokenizer as HFTokenizer

if TYPE_CHECKING:
    from ..chat_template import ChatTemplate

from .bpe import byte_decoder as _byte_decoder
from .build import ModelChooser, load_parts
from .spm import SPACE
from .vocab import TokenAttr, Vocab, open_gguf
from .wpm import wpm_tokenize


_NEWLINE_RUNS = re.compile(r"(\n+)")


@dataclass(slots=True)
class Tokenizer:
    vocab: Vocab
    models: ModelChooser                 # the `tokenizers` model for raw fragments (no special tokens)
    spell: dict[int, tuple[int, ...]] = field(default_factory=dict)  # SPM phantom id -> bytes
    cache_status: str = "uncached"       # cache.py: loaded / built / uncached
    _chat: ChatTemplate | None = field(default=None, init=False, repr=False)
    _byte_dec: dict[str, int] = field(default_factory=_byte_decoder, repr=False)

    @property
    def chat(self) -> ChatTemplate:
        """The compiled chat template (on first use: `tokenize` never needs Jinja).  It gets
        BOS/EOS as llama.cpp passes them: their pieces (special)."""
        if self._chat is None:
            from ..chat_template import ChatTemplate

            def piece(t: int | None) -> str:
                return "" if t is None else self.token_to_piece(t, special=True).decode("utf-8", "replace")
            v = self.vocab
            self._chat = ChatTemplate(v.chat_template, bos_token=piece(self.bos),
                                      eos_token=piece(self.eos), add_bos=v.add_bos, add_eos=v.add_eos)
        return self._chat

    def use_chat_template(self, source: str | None) -> None:
        """Render chats with `source` (--chat-template / --chat-template-file) instead of the
        GGUF's template; None keeps the GGUF's."""
        if source is not None:
            from ..chat_template import ChatTemplate

            self._chat = None
            bos, eos = self.chat.bos_token, self.chat.eos_token
            v = self.vocab
            self._chat = ChatTemplate(source, bos_token=bos, eos_token=eos, add_bos=v.add_bos, add_eos=v.add_eos)

    @classmethod
    def from_gguf(cls, src: Any, cache: Path | None = None) -> "Tokenizer":
        """Build from a GGUF path or an open GGUFFile.  The vocabulary stays in the mapped
        file; the tables derived by walking it come from cache.py (cache: a folder
        instead of $LLAMAPY_HOME/tokenizers/)."""
        parts = load_parts(open_gguf(src), cache)
        return cls(vocab=parts.vocab, models=ModelChooser(parts), spell=parts.spell, cache_status=parts.cache_status)

    @property
    def hf(self) -> HFTokenizer:
        """The whole `tokenizers` model (built on first use)."""
        return self.models.whole()

    # ---- vocabulary facts -------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    @property
    def bos(self) -> int | None:
        return self.vocab.special["bos"]

    @property
    def eos(self) -> int | None:
        return self.vocab.special["eos"]

    @property
    def eot(self) -> int | None:
        return self.vocab.special["eot"]

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos

    def is_eog(self, token: int) -> bool:
        """End of generation: eos, eot, eom and the EOG texts llama.cpp recognises."""
        return token in self.vocab.eog_ids

    def token_attr(self, token: int) -> TokenAttr:
        return TokenAttr(int(self.vocab.attrs[token]))

    # ---- text -> ids ------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """llama_tokenize: BOS first when add_special and the vocab's add_bos; EOS last when
        add_special and add_eos. parse_special turns control-token text (e.g. <|im_start|>)
        into its id; user-defined tokens are always matched whole."""
        v = self.vocab
        out: list[int] = []
        if add_special and v.add_bos:
            if self.bos is None:
                raise ValueError("the vocab asks for BOS (add_bos) but has no bos token id")
            out.append(self.bos)
        frags = v.partition(text, parse_special)
        wpm = self.models.parts.wpm
        if wpm is not None:
            for f in frags:
                out.extend(wpm_tokenize(f, v.token_to_id.get, wpm.max_token_len, v.special["unk"], wpm.lowercase,
                                        wpm.strip_accents) if isinstance(f, str) else (f,))
            if add_special and v.special["sep"] is not None:  # llama.cpp's WPM: [SEP] last
                out.append(v.special["sep"])
        elif v.model == "llama":
            self._tokenize_spm(frags, out)
        else:
            if self.models.parts.pre is not None and self.models.parts.pre.escape_whitespaces:
                frags = self._newline_runs(frags)
            raw = [f for f in frags if isinstance(f, str)]
            encs = iter(self.models.for_words(raw).encode_batch(raw, add_special_tokens=False)) if raw else iter(())
            for f in frags:
                out.extend(next(encs).ids if isinstance(f, str) else (f,))
        if add_special and v.add_eos:
            if self.eos is None:
                raise ValueError("the vocab asks for EOS (add_eos) but has no eos token id")
            out.append(self.eos)
        return out

    def _newline_runs(self, frags: list[str | int]) -> list[str | int]:
        """SPM-style BPE (Gemma 4): spaces become ▁; a run of newlines that is itself a token
        is that token, unmerged (llama.cpp's llm_tokenizer_bpe_session special case); other
        text stays for the model, whose regex keeps newline runs apart."""
        out: list[str | int] = []
        for f in frags:
            if not isinstance(f, str):
                out.append(f)
                continue
            for piece in _NEWLINE_RUNS.split(f.replace(" ", SPACE)):
                tid = self.vocab.token_to_id.get(piece) if piece.startswith("\n") else None
                if tid is not None:
                    out.append(int(tid))
                elif piece:
                    out.append(piece)
        return out

    def _tokenize_spm(self, frags: list[str | int], out: list[int]) -> None:
        """SPM: a space is prefixed to a raw fragment that follows BOS/a special token (or
        starts the text) when add_space_prefix; spaces become ▁ before the merge."""
        prev_special = True
        texts: list[str] = []
        for f in frags:
            if isinstance(f, str):
                prefix = " " if self.vocab.add_space_prefix and prev_special else ""
                texts.append((prefix + f).replace(" ", SPACE))
            prev_special = not isinstance(f, str)
        encs = iter(self.models.for_words(texts).encode_batch(texts, add_special_tokens=False)) if texts else iter(())
        spell = self.spell
        for f in frags:
            if not isinstance(f, str):
                out.append(f)
                continue
            for t in next(encs).ids:
                out.extend(spell[t] if t in spell else (t,))

    # ---- ids -> text ------------------------------------------------------------------
    def token_to_piece(self, token: int, special: bool = True) -> bytes:
        """llama_token_to_piece (lstrip 0): the token's raw bytes — possibly a partial UTF-8
        sequence. Control/unknown tokens give b"" unless special."""
        v = self.vocab
        if not 0 <= token < v.n_vocab:
            raise ValueError(f"token id {token} out of range (n_vocab = {v.n_vocab})")
        attr, text = int(v.attrs[token]), v.tokens[token]
        if attr & (TokenAttr.UNKNOWN | TokenAttr.CONTROL):
            return text.encode("utf-8") if special else b""
        if attr & TokenAttr.USER_DEFINED:
            return text.encode("utf-8")
        if attr & TokenAttr.NORMAL:
            if v.space_marked:
                return text.replace(SPACE, " ").encode("utf-8")
            return self._decode_byte_level(text)
        if attr & TokenAttr.BYTE:
            return bytes([int(text[3:5], 16)])
        return b""

    def _decode_byte_level(self, text: str) -> bytes:
        """llama_decode_text: each byte-level character back to its byte; a character outside
        the byte alphabet becomes llama.cpp's "[UNK_BYTE_0x..]" marker."""
        out = bytearray()
        for ch in text:
            b = self._byte_dec.get(ch)
            if b is not None:
                out.append(b)
            else:
                utf8 = ch.encode("utf-8")
                out += b"[UNK_BYTE_0x" + utf8.hex().encode() + text.encode("utf-8") + b"]"
        return bytes(out)

    def detokenize(self, ids: Iterable[int], remove_special: bool = False,
                   unparse_special: bool = False) -> str:
        """llama_detokenize: the pieces joined; with remove_special a leading BOS / trailing EOS
        (when the vocab adds them) are dropped; the first piece loses one leading space when
        add_space_prefix; BPE vocabs with clean_spaces get llama.cpp's three clean-up passes."""
        ids = list(ids)
        v = self.vocab
        remove_space = v.add_space_prefix
        if remove_special and v.add_bos and ids and ids[0] == self.bos:
            remove_space = False
            ids = ids[1:]
        if remove_special and v.add_eos and ids and ids[-1] == self.eos:
            ids = ids[:-1]
        buf = bytearray()
        for i, tid in enumerate(ids):
            piece = self.token_to_piece(tid, special=unparse_special)
            if i == 0 and remove_space and piece.startswith(b" "):
                piece = piece[1:]
            buf += piece
        if v.clean_spaces:
            buf = clean_spaces(buf)
        return buf.decode("utf-8", errors="replace")

    # ---- chat -------------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            **extra: Any) -> str:
        """Render the GGUF's tokenizer.chat_template (ChatML when it has none)."""
        return self.chat.render(messages, add_generation_prompt=add_generation_prompt, **extra)


def clean_spaces(text: bytearray) -> bytearray:
    """llama.cpp's detokenize clean-up for BPE vocabs with clean_spaces, pass for pass:
    drop the space in " ?", " !", " .", " ,"; turn " ' " into "'"; drop the space before
    "'s", "'m", "'re", "'ve" (not before "'t", "'d", "'ll")."""
    t = bytearray(text)
    total = len(t)
    n, total = total, (1 if total else 0)                   # pass 1: " ?", " !", " .", " ,"
    for i in range(1, n):
        x = t[i]
        if t[i - 1] == 0x20 and x in b"?!.,":
            total -= 1
        t[total] = x
        total += 1
    n, total, i = total, (1 if total else 0), 1             # pass 2: " ' "
    while i < n:
        x = t[i]
        if x == 0x27 and i + 1 < n and t[i - 1] == 0x20 and t[i + 1] == 0x20:
            total -= 1
            i += 1
            t[i] = 0
        t[total] = x
        total += 1
        i += 1
    n, total = total, (1 if total else 0)                   # pass 3: contractions
    for i in range(1, n):
        x = t[i]
        if t[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
            x1 = t[i + 1]
            if x1 in b"sm" or (i + 2 < n and (x1, t[i + 2]) in ((0x72, 0x65), (0x76, 0x65))):
                total -= 1
        t[total] = x
        total += 1
    return t[:total]


class StreamDecoder:
    """Token-at-a-time detokenizer for streaming: returns only complete UTF-8 text, holding
    back a multi-byte character split across tokens until its last byte arrives."""

    def __init__(self, tokenizer: Tokenizer, special: bool = False) -> None:
        self.tokenizer = tokenizer
        self.special = special
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token: int) -> str:
        return self._dec.decode(self.tokenizer.token_to_piece(token, special=self.special))

    def flush(self) -> str:
        """End of stream: whatever is held back, invalid bytes as U+FFFD."""
        return self._dec.decode(b"", final=True)

    @property
    def pending(self) -> bytes:
        """The bytes held back (a partial UTF-8 sequence)."""
        return self._dec.getstate()[0]
