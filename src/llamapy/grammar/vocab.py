"""The model's vocabulary as llguidance sees it: one byte string per token id.

llguidance computes token masks over byte strings, so each id gets exactly the bytes
llamapy's detokenizer gives it (Tokenizer.token_to_piece); control and user-defined
"<...>" tokens are prefixed with 0xFF, llguidance's mark for special tokens (the same rule as
its llama.cpp binding), so grammar text never matches them and end-of-generation stays the
only way out.  Ids past the tokenizer's vocabulary (a padded output layer) are empty."""
from __future__ import annotations

from typing import TYPE_CHECKING

import llguidance

from ..tokenizer.spm import SPACE
from ..tokenizer.vocab import TokenAttr

if TYPE_CHECKING:
    from ..tokenizer import Tokenizer


def token_pieces(tok: "Tokenizer") -> tuple[list[bytes], list[int]]:
    """(piece per id, the special ids): token_to_piece(id, special=True) for every id, with
    special pieces 0xFF-prefixed.  Normal tokens take a fast path (one str.translate for
    byte-level BPE, one replace for SPM); anything else goes through token_to_piece, so the
    bytes are the detokenizer's."""
    v = tok.vocab
    texts, attrs = list(v.tokens), v.attrs.tolist()
    spm = v.space_marked  # pieces with ▁ for a space
    table = {ord(ch): b for ch, b in tok._byte_dec.items()}  # byte-level char -> its byte (latin-1 code point)
    normal, control, user = int(TokenAttr.NORMAL), int(TokenAttr.CONTROL), int(TokenAttr.USER_DEFINED)
    pieces: list[bytes] = []
    special: list[int] = []
    for i, (text, attr) in enumerate(zip(texts, attrs)):
        b: bytes | None = None
        if attr & normal and not attr & (control | user):
            if spm:
                b = text.replace(SPACE, " ").encode("utf-8")
            else:
                try:
                    b = text.translate(table).encode("latin-1")
                except UnicodeEncodeError:  # a char outside the byte alphabet: the slow path's marker
                    b = None
        if b is None:
            b = tok.token_to_piece(i, special=True)
            if attr & control or (attr & user and b.startswith(b"<") and b.endswith(b">")):
                b = b"\xff" + b
                special.append(i)
        pieces.append(b)
    return pieces, special


class _Wrapped:
    """What llguidance.TokenizerWrapper reads: eos/bos ids, the byte pieces, special ids, and
    a call that tokenizes text (for forced strings) exactly as prompts are tokenized."""

    def __init__(self, tok: "Tokenizer", n_vocab: int) -> None:
        pieces, special = token_pieces(tok)
        pieces.extend(b"" for _ in range(n_vocab - len(pieces)))
        self.tokens = pieces
        self.special_token_ids = special
        self.eos_token_id = next(t for t in (tok.eos, tok.eot, 0) if t is not None)
        self.bos_token_id = tok.bos
        self._tok = tok

    def __call__(self, text: str | bytes) -> list[int]:
        s = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
        return self._tok.tokenize(s, add_special=False, parse_special=False)


def ll_tokenizer(tok: "Tokenizer", n_vocab: int) -> llguidance.LLTokenizer:
    """The LLTokenizer for a model whose logits have n_vocab entries; every end-of-generation
    id (eos, eot, eom, ...) ends a grammar.  One pass over the vocabulary (about 1 s for
    262k tokens): build it once per model."""
    w = _Wrapped(tok, n_vocab)
    eog = sorted(tok.vocab.eog_ids) or [w.eos_token_id]
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(w), n_vocab=n_vocab, eos_token=eog)
