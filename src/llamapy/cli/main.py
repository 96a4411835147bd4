"""`llamapy` command line (llama.cpp's flag spellings): the parser, and main() running one
command.  Each subcommand's flags and body live in a module of this package: run, chat,
embedding, tokenize, serve, mem, info, bench (bench, batched-bench, perplexity), quantize, pull."""
from __future__ import annotations

import argparse
import sys

from .bench import add_parser as add_bench  # bench, batched-bench, perplexity
from .chat import add_parser as add_chat
from .embedding import add_parser as add_embedding
from .info import add_parser as add_info
from .mem import add_parser as add_mem
from .pull import add_parser as add_pull
from .quantize import add_parser as add_quantize
from .run import add_parser as add_run
from .serve import add_parser as add_serve
from .tokenize import add_parser as add_tokenize


class _Parser(argparse.ArgumentParser):
    """argparse, minus one reading llama.cpp users trip on: a single-dash word is not a short
    option with its value glued on unless that value is a number (`-n4`, `-c2048` still work),
    so llama.cpp's `-cnv`, `-st` or `-mg 0` are unknown flags, named as such, rather than
    `-c nv` ("invalid int value: 'nv'") or `-m g` (a model named "g")."""

    def _get_option_tuples(self, option_string: str) -> list:
        def numeric(v: str) -> bool:
            try:
                float(v)
                return True
            except ValueError:
                return False

        out = super()._get_option_tuples(option_string)  # (action, option string, [sep,] explicit value)
        if len(option_string) > 2 and option_string[1] not in self.prefix_chars:
            out = [t for t in out if t[1] != option_string[:2] or numeric(t[-1] or "")]
        return out

    def error(self, message: str):
        if message.startswith("unrecognized arguments"):
            message += " (llamapy does not read that flag; `llamapy COMMAND --help` lists the ones it does)"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; subcommands in --help's order."""
    ap = _Parser(prog="llamapy", description="llama.cpp's inference runtime in Python on PyTorch")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for add in (add_run, add_chat, add_embedding, add_tokenize, add_serve, add_mem, add_info, add_bench, add_quantize,
                add_pull):
        add(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run one command.  As the program itself (argv None, `llamapy ...`), the process ends
    as soon as the command returns and its output is flushed: torch's interpreter teardown
    alone costs 0.2-0.9 s on a 2-core machine, after the work is done."""
    from ..pipeline.env import is_stage_worker

    if is_stage_worker():  # torchrun started this process as a pipeline stage other than 0
        from ..pipeline.stage import main as stage_main

        return stage_main()
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as typed (serve --replicas logs the replicas' flags)
    try:
        rc = int(args.fn(args) or 0)
    except KeyboardInterrupt:
        rc = 130
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        rc = 1
    if argv is None and "torch" in sys.modules:
        _exit_now(rc)
    return rc


def _exit_now(rc: int) -> None:
    """Flush what was written, then end the process without the interpreter's teardown."""
    import logging
    import os

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe
            pass
    os._exit(rc)
