"""`llamapy chat`: an interactive conversation through the model's chat template, each turn
decoding only what the cache does not hold yet."""
from __future__ import annotations

import argparse
import sys

from ..log import setup_logging
from .args import load_context, make_sampler
from .chat_flags import add_chat_template, chat_options
from .flags import add_context, add_model, add_sampling
from .run import stream_tokens


def add_parser(sub) -> None:
    p = sub.add_parser("chat", help="interactive chat using the model's chat template")
    add_model(p), add_context(p), add_sampling(p), add_chat_template(p)
    p.add_argument("-sys", "--system-prompt", default=None)
    p.add_argument("-n", "--n-predict", type=int, default=512)
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(fn=cmd_chat)


def cmd_chat(a: argparse.Namespace) -> int:
    """Each turn re-renders the conversation with the chat template, keeps the longest common
    token prefix already in the cache and decodes only the rest."""
    from ..tokens import common_prefix
    from ..memory.factory import can_reuse_prefix

    from ..chat.apply import apply_template
    from ..chat.builtin import legacy_prompt

    setup_logging(verbose=a.verbose)
    opts = chat_options(a)  # bad flags fail before anything loads
    model, ctx = load_context(a)
    model.tokenizer.use_chat_template(opts.template)
    sampler = make_sampler(a)
    messages: list[dict[str, str]] = []
    if a.system_prompt:
        messages.append({"role": "system", "content": a.system_prompt})
    cached: list[int] = []  # tokens whose K/V are in sequence 0
    print("chat: type a message; an empty line or Ctrl-D quits", file=sys.stderr)
    while True:
        try:
            user = input("> ")
        except EOFError:
            break
        if not user.strip():
            break
        messages.append({"role": "user", "content": user})
        prompt = apply_template(model.tokenizer.chat, messages, opts=opts) if opts.use_jinja else \
            legacy_prompt(model.tokenizer.chat.source, messages)  # --no-jinja: llama.cpp's built-in templates
        ids = model.tokenize(prompt, add_special=True, parse_special=True)
        n_keep = common_prefix(cached, ids[:-1])  # re-decode at least one token for fresh logits
        if not can_reuse_prefix(ctx.memory, 0, n_keep):  # SWA cells of that prefix are gone
            n_keep = 0
        ctx.memory.seq_rm(0, n_keep, -1)
        buf = _Tee(sys.stdout)
        tm = stream_tokens(model, ctx, sampler, ids[n_keep:], a.n_predict, out=buf)
        print()
        cached = ids + tm.tokens
        messages.append({"role": "assistant", "content": buf.text()})
    return 0


class _Tee:
    """Writes through to a stream and keeps a copy of the text."""

    def __init__(self, out) -> None:
        self.out, self.parts = out, []

    def write(self, s: str) -> None:
        self.parts.append(s)
        self.out.write(s)

    def flush(self) -> None:
        self.out.flush()

    def text(self) -> str:
        return "".join(self.parts)
