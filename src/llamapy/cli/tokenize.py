"""`llamapy tokenize`: llama-tokenize's listing of a text's token ids and pieces (the
vocabulary only: no weights, no torch)."""
from __future__ import annotations

import argparse

from .flags import add_model


def add_parser(sub) -> None:
    p = sub.add_parser("tokenize", help="print the token ids of a text")
    add_model(p)
    p.add_argument("-p", "--prompt", required=True)
    p.add_argument("--no-bos", action="store_true", help="do not add BOS/special tokens")
    p.add_argument("--parse-special", action="store_true", help="parse special-token text like <|im_start|>")
    p.add_argument("--ids", action="store_true", help="print only the list of ids")
    p.set_defaults(fn=cmd_tokenize)


def cmd_tokenize(a: argparse.Namespace) -> int:
    from ..registry import resolve_model
    from ..tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(resolve_model(a.model))  # the vocabulary only: no weights, no torch
    ids = tok.tokenize(a.prompt, add_special=not a.no_bos, parse_special=a.parse_special)
    if a.ids:
        print(ids)
    else:
        for i in ids:
            print(f"{i:6d} -> '{tok.token_to_piece(i).decode('utf-8', errors='replace')}'")
    return 0
