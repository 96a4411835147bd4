"""`llamapy run`: generate from a prompt, streaming the tokens, then llama.cpp's timings and
memory lines on stderr; stream_tokens() and print_perf() are chat's too."""
from __future__ import annotations

import argparse
import sys

from ..log import setup_logging
from .args import ctx_params, grammar_spec, load_context, make_sampler, spec_params
from .chat_flags import add_chat_template
from .flags import add_context, add_grammar, add_model, add_sampling, add_speculative
from .lora_flags import add_lora


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="generate text from a prompt, streaming tokens")
    add_model(p), add_context(p), add_sampling(p), add_speculative(p), add_grammar(p), add_chat_template(p)
    add_lora(p)
    p.add_argument("-p", "--prompt", default="Once upon a time")
    p.add_argument("-n", "--n-predict", type=int, default=128, help="tokens to generate (-1: until end or context full)")
    p.add_argument("-no-cnv", "--no-conversation", action="store_true",
                   help="accepted for llama.cpp's command lines: run never holds a conversation (llamapy chat does)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every load/context log line")
    p.set_defaults(fn=cmd_run)


def stream_tokens(model, ctx, sampler, ids: list[int], n_predict: int, out=sys.stdout, spec=None):
    from ..generate import GenTimings, generate
    from ..tokenizer import StreamDecoder

    tm = GenTimings()
    dec = StreamDecoder(model.tokenizer)
    for t in generate(ctx, sampler, ids, n_predict, timings=tm, spec=spec):
        out.write(dec.feed(t))
        out.flush()
    out.write(dec.flush())
    out.flush()
    return tm


def print_perf(tm) -> None:
    def line(name: str, t: float, n: int) -> str:
        ms = t * 1000
        per = ms / n if n else 0.0
        tps = n / t if t > 0 else 0.0
        return f"llama_perf_context_print: {name:>16} = {ms:10.2f} ms / {n:5d} tokens ({per:8.2f} ms per token, {tps:8.2f} tokens per second)"

    print(line("prompt eval time", tm.t_prompt, tm.n_prompt), file=sys.stderr)
    print(line("eval time", tm.t_gen, tm.n_gen), file=sys.stderr)
    if tm.n_drafted:  # llama-speculative's summary lines
        print(f"draft acceptance rate = {tm.n_accepted / tm.n_drafted:.5f} ({tm.n_accepted:5d} accepted / "
              f"{tm.n_drafted:5d} generated)", file=sys.stderr)
        print(f"speculative: {tm.n_verify} verifications of {tm.n_drafted / tm.n_verify:.2f} drafted tokens on average, "
              f"{tm.n_verify_ubatches / tm.n_verify:.2f} ubatches each (-ub splits the sampled token + draft rows)",
              file=sys.stderr)


def cmd_run(a: argparse.Namespace) -> int:
    from .chat_flags import chat_options

    setup_logging(verbose=True)
    sp = spec_params(a)  # bad flags fail before anything loads
    chat = chat_options(a)
    gspec = grammar_spec(a)
    model, ctx = load_context(a)
    from ..speculative import make_speculator

    spec = make_speculator(sp, model, ctx_params(a))
    sampler = make_sampler(a)
    if gspec is not None:
        from ..grammar import GrammarCompiler

        sampler.grammar = GrammarCompiler(model.tokenizer, model.n_vocab).constraint(gspec)
    prompt = a.prompt
    if chat.template is not None or chat.template_kwargs:  # -p is one user turn through that template
        from ..chat.apply import apply_template

        from ..chat.builtin import legacy_prompt

        model.tokenizer.use_chat_template(chat.template)
        turn = [{"role": "user", "content": a.prompt}]
        prompt = apply_template(model.tokenizer.chat, turn, opts=chat) if chat.use_jinja else \
            legacy_prompt(model.tokenizer.chat.source, turn)  # --no-jinja: llama.cpp's built-in templates
    ids = model.tokenize(prompt, add_special=True, parse_special=True)
    sys.stdout.write(prompt)
    tm = stream_tokens(model, ctx, sampler, ids, a.n_predict, spec=spec)
    sys.stdout.write("\n")
    print(file=sys.stderr)
    if tm.stop == "grammar":
        print(f"generation ended by the grammar: {tm.error}", file=sys.stderr)
    print_perf(tm)
    from ..context import print_memory_breakdown

    print_memory_breakdown(ctx)
    return 0
