"""`llamapy bench`, `llamapy batched-bench`, `llamapy perplexity`: llama-bench,
llama-batched-bench and llama-perplexity with their flag spellings and output."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .args import ctx_params, load_context, pipe_params, resolve_device, spec_params
from .flags import add_context, add_deterministic, add_model, add_pipeline, add_speculative, gpu_layers
from .lora_flags import add_lora, lora_specs


def _ints(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x != ""]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of integers, got '{s}'") from e


def _strs(s: str) -> list[str]:
    return [x for x in s.split(",") if x != ""]


_FA = {"1": "on", "0": "off", "-1": "auto"}  # llama-bench also takes -fa 1/0


def _pairs(s: str) -> tuple[int, int]:
    a = _ints(s)
    if len(a) != 2:
        raise argparse.ArgumentTypeError(f"-pg takes <pp,tg>, got '{s}'")
    return a[0], a[1]


def add_parser(sub) -> None:
    """Register bench, batched-bench and perplexity."""
    p = sub.add_parser("bench", help="llama-bench: pp/tg tokens per second over every combination of options")
    add_model(p)
    p.add_argument("-p", "--n-prompt", type=_ints, action="append", help="prompt tokens (default 512)")
    p.add_argument("-n", "--n-gen", type=_ints, action="append", help="generated tokens (default 128)")
    p.add_argument("-pg", type=_pairs, action="append", default=None, metavar="PP,TG", help="prompt then generation test")
    p.add_argument("-d", "--n-depth", type=_ints, default=[0], help="tokens already in the cache before the test")
    p.add_argument("-b", "--batch-size", type=_ints, default=[2048])
    p.add_argument("-ub", "--ubatch-size", type=_ints, default=[512])
    p.add_argument("-ctk", "--cache-type-k", type=_strs, default=["f16"])
    p.add_argument("-ctv", "--cache-type-v", type=_strs, default=["f16"])
    p.add_argument("-fa", "--flash-attn", type=_strs, default=["auto"])
    p.add_argument("-nkvo", "--no-kv-offload", type=_ints, default=[0], help="0,1: KV cache on the device / in host memory")
    p.add_argument("-c", "--ctx-size", type=_ints, default=[0], help="KV cells (0: n_prompt + n_gen + n_depth)")
    p.add_argument("-t", "--threads", type=_ints, default=None, help="CPU threads (default: torch's)")
    p.add_argument("-r", "--repetitions", type=int, default=5)
    p.add_argument("-o", "--output", default="md", choices=("md", "csv", "json", "jsonl"))
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="draw pp t/s and compute MiB against -ub")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("-ngl", "--n-gpu-layers", dest="n_gpu_layers", default="auto", type=gpu_layers,
                   help="llama-bench's layers in VRAM (one value): 0 means --device cpu, others leave it to --device")
    p.add_argument("-v", "--verbose", action="store_true")
    add_speculative(p)  # tg tests then generate greedily with drafts
    add_pipeline(p)
    add_deterministic(p)
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("batched-bench", help="llama-batched-bench: pp/tg speed with B parallel sequences")
    add_model(p), add_context(p)
    p.add_argument("-npp", type=_ints, default=[128], help="prompt tokens per sequence")
    p.add_argument("-ntg", type=_ints, default=[128], help="generated tokens per sequence")
    p.add_argument("-npl", type=_ints, default=[1], help="parallel sequences (B)")
    p.add_argument("-pps", action="store_true", help="one prompt shared by all sequences (seq_cp)")
    p.add_argument("-tgs", action="store_true", help="generate for each sequence separately")
    p.add_argument("-no-kvu", "--no-kv-unified", dest="kv_unified", action="store_false",
                   help="one KV stream per sequence (the default; -kvu: one unified cache)")
    p.add_argument("--output-format", default="md", choices=("md", "jsonl"))
    p.add_argument("-v", "--verbose", action="store_true")
    add_speculative(p)  # each sequence then a server slot that drafts
    p.set_defaults(fn=cmd_batched_bench)  # one KV stream per sequence unless -kvu, as llama-batched-bench

    p = sub.add_parser("perplexity", help="llama-perplexity: PPL over the second half of each n_ctx chunk")
    add_model(p), add_context(p)
    p.add_argument("-f", "--file", default=None, help="text file to score (with --kl-divergence: the base file's tokens)")
    p.add_argument("--chunks", type=int, default=-1, help="max chunks (-1: all)")
    p.add_argument("--kl-divergence-base", default=None, metavar="FILE",
                   help="save the log-probabilities of every scored token to FILE (llama.cpp's format); "
                        "with --kl-divergence: read them from FILE")
    p.add_argument("--kl-divergence", action="store_true",
                   help="score the tokens of --kl-divergence-base FILE and compare with it: KL divergence, same top p, Δp")
    p.add_argument("--exact", action="store_true", help="dequantize all weights to float32: the reference")
    p.add_argument("-v", "--verbose", action="store_true")
    add_lora(p)
    p.set_defaults(fn=cmd_perplexity, ctx_size=512)


def _deterministic(a: argparse.Namespace) -> None:
    """--deterministic for every context this tool opens (its own ContextParams included)."""
    if getattr(a, "deterministic", False):
        os.environ["LLAMAPY_DETERMINISTIC"] = "1"


def _quiet_logs(verbose: bool) -> None:
    """llama-bench's tools silence the library's log unless -v: only errors get through."""
    import logging

    from ..log import setup_logging

    setup_logging(verbose=verbose)
    if not verbose:
        logging.getLogger("llamapy").setLevel(logging.ERROR)


def _threads(a: argparse.Namespace) -> int:
    import torch

    return a.threads if a.threads and a.threads > 0 else torch.get_num_threads()


def cmd_bench(a: argparse.Namespace) -> int:
    import torch

    from ..bench.llama_bench import BenchParams, run_bench
    from ..bench.plot import plot_ubatch
    from ..bench.printers import make_printer

    _deterministic(a)
    _quiet_logs(a.verbose)
    flat = lambda xs, d: [v for x in xs for v in x] if xs else d  # noqa: E731  (-p 1 -p 2 == -p 1,2)
    p = BenchParams(
        model=a.model, n_prompt=flat(a.n_prompt, [512]), n_gen=flat(a.n_gen, [128]), n_pg=a.pg or [], n_depth=a.n_depth,
        n_batch=a.batch_size, n_ubatch=a.ubatch_size, type_k=a.cache_type_k, type_v=a.cache_type_v,
        flash_attn=[_FA.get(x, x) for x in a.flash_attn], n_ctx=a.ctx_size, n_threads=a.threads or [torch.get_num_threads()],
        reps=a.repetitions, no_warmup=a.no_warmup, device=resolve_device(a), no_kv_offload=[bool(x) for x in a.no_kv_offload],
        spec=spec_params(a) if a.spec_type != "none" else None, pipe=pipe_params(a),
    )
    if p.reps < 1:
        raise ValueError(f"-r {p.reps}: need at least one repetition")
    printer = make_printer(a.output, sys.stdout)
    printer.header(p)
    results = run_bench(p, on_result=printer.test)
    printer.footer()
    sys.stdout.flush()
    if a.plot:
        out = plot_ubatch(results, a.plot)
        print(f"plot written to {out}", file=sys.stderr)
    return 0


def cmd_batched_bench(a: argparse.Namespace) -> int:
    from ..bench.batched_bench import jsonl_row, md_header, md_row, run_batched_bench

    _quiet_logs(a.verbose)
    cp = ctx_params(a)
    cp.n_seq_max = max(a.npl) if a.npl else 1  # ensure enough sequences are available
    model, ctx = load_context(a, cp)
    nt = _threads(a)
    if a.spec_type != "none":
        return _batched_bench_spec(a, model, ctx, cp, nt)
    if a.output_format == "md":
        print(md_header(ctx, a.pps, a.tgs, nt))
    for r in run_batched_bench(ctx, a.npp, a.ntg, a.npl, a.pps, a.tgs):
        print(md_row(r) if a.output_format == "md" else jsonl_row(ctx, r, a.pps, nt), flush=True)
    print()
    return 0


def _batched_bench_spec(a: argparse.Namespace, model, ctx, cp, nt: int) -> int:
    """batched-bench --spec-type: every point through the server's scheduler, each sequence a
    slot that drafts; the rows gain the drafts' counts and the ubatches per generation step."""
    import json
    import random

    from ..bench.batched_bench import md_header, md_row, n_ctx_required, run_one_spec
    from ..speculative.proposer import make_proposers

    if a.pps or a.tgs:
        raise ValueError("--spec-type runs each sequence as a server slot: -pps and -tgs do not apply")
    spec = spec_params(a)
    proposers = make_proposers(spec, model, cp, cp.n_seq_max)
    rng = random.Random(1)
    if a.output_format == "md":
        print(md_header(ctx, False, False, nt).rstrip("\n") + f"  ({spec.type}: drafted / accepted, ubatches per step)")
    for pp, tg, pl in ((pp, tg, pl) for pp in a.npp for tg in a.ntg for pl in a.npl):
        if n_ctx_required(pp, tg, pl, False, ctx.cparams.kv_unified) > ctx.n_ctx:
            continue
        r, sr = run_one_spec(ctx, pp, tg, pl, spec, proposers, rng)
        if a.output_format == "md":
            print(md_row(r) + f" {sr.n_drafted} / {sr.n_accepted}, {sr.ubatches_per_step:.2f}", flush=True)
        else:
            print(json.dumps({"n_kv_max": ctx.n_ctx, "n_batch": ctx.cparams.n_batch, "n_ubatch": ctx.cparams.n_ubatch,
                              "pp": r.pp, "tg": r.tg, "pl": r.pl, "n_kv": r.n_kv, "t_pp": r.t_pp, "speed_pp": r.speed_pp,
                              "t_tg": r.t_tg, "speed_tg": r.speed_tg, "t": r.t, "speed": r.speed, "spec_type": spec.type,
                              "n_drafted": sr.n_drafted, "n_accepted": sr.n_accepted, "n_verify": sr.n_verify,
                              "ubatches_per_step": sr.ubatches_per_step}), flush=True)
    print()
    return 0


def cmd_perplexity(a: argparse.Namespace) -> int:
    """llama-perplexity's main(): perplexity(), or kl_divergence() with --kl-divergence."""
    import time

    from ..bench import kld
    from ..bench.perplexity import perplexity, perplexity_params
    from ..model.model import Model
    from ..pipeline import open_context

    _deterministic(a)
    _quiet_logs(a.verbose)
    if a.kl_divergence and not a.kl_divergence_base:
        raise ValueError("--kl-divergence needs --kl-divergence-base FILE: the log-probabilities of the base model "
                         "(written by a run with --kl-divergence-base FILE alone)")
    if not a.kl_divergence and not a.file:
        raise ValueError("perplexity needs -f FILE, the text to score (or --kl-divergence with --kl-divergence-base FILE)")
    pipe = pipe_params(a)
    if a.kl_divergence:
        if pipe.enabled:
            raise ValueError("--kl-divergence runs in one process: drop --pp")
        model = Model.load(a.model, device=resolve_device(a), exact=a.exact)
        if lora_specs(a):
            model.add_loras(list(lora_specs(a)))
        return _kl_divergence(a, model)
    text = Path(a.file).read_text(encoding="utf-8", errors="replace")
    n_ctx = a.ctx_size
    params = perplexity_params(n_ctx, a.batch_size, a.ubatch_size, type_k=a.cache_type_k, type_v=a.cache_type_v,
                               flash_attn=a.flash_attn, n_threads=a.threads, device=resolve_device(a),
                               offload_kqv=not a.no_kv_offload)
    model, ctx = open_context(a.model, params, pipe, device=resolve_device(a), exact=a.exact, mmap=getattr(a, "mmap", None),
                              lora=lora_specs(a))
    t0 = time.perf_counter()
    tokens = model.tokenize(text, add_special=True, parse_special=False)
    print(f"perplexity: tokenization took {(time.perf_counter() - t0) * 1e3:g} ms", file=sys.stderr)
    n_seq = ctx.cparams.n_seq_max
    n_chunk = len(tokens) // n_ctx if a.chunks < 0 else min(a.chunks, len(tokens) // n_ctx)
    print(f"perplexity: calculating perplexity over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={ctx.cparams.n_batch}, "
          f"n_seq={n_seq}", file=sys.stderr)
    writer = None
    if a.kl_divergence_base and len(tokens) >= 2 * n_ctx:
        writer = kld.BaseWriter.create(a.kl_divergence_base, n_ctx, model.n_vocab, tokens, n_chunk)
        print(f"perplexity: saving all logits to {a.kl_divergence_base}", file=sys.stderr)
    try:
        res = perplexity(ctx, tokens, n_ctx, a.chunks, on_chunk=lambda i, p: print(f"[{i}]{p:.4f},", end="", flush=True),
                         on_logits=writer)
    finally:
        if writer is not None:
            writer.close()
    print()
    print(f"Final estimate: PPL = {res.ppl:.4f} +/- {res.ppl_err:.5f}")
    return 0


def _kl_divergence(a: argparse.Namespace, model) -> int:
    """llama-perplexity's kl_divergence(): the tokens and n_ctx come from the base file (-c only
    has to be at least its n_ctx); -f, when given, must tokenize to the same tokens; --chunks is
    ignored, as llama.cpp ignores it here (it applies when writing the base file)."""
    from ..bench import kld
    from ..bench.perplexity import make_context, perplexity

    with kld.BaseFile.open(a.kl_divergence_base, model.n_vocab) as base:
        if base.n_ctx > a.ctx_size:
            raise ValueError(f"{base.path} has been computed with n_ctx {base.n_ctx}, while the current context is "
                             f"{a.ctx_size}. Increase it with -c and retry")
        if base.n_chunk < 1:
            raise ValueError(f"{base.path} holds no chunks")
        if a.file:
            text = Path(a.file).read_text(encoding="utf-8", errors="replace")
            base.check_tokens(model.tokenize(text, add_special=True, parse_special=False))
        ctx = make_context(model, base.n_ctx, a.batch_size, a.ubatch_size, type_k=a.cache_type_k, type_v=a.cache_type_v,
                           flash_attn=a.flash_attn, n_threads=a.threads, device=resolve_device(a),
                       offload_kqv=not a.no_kv_offload)
        print(f"kl_divergence: computing over {base.n_chunk} chunks, n_ctx={base.n_ctx}, "
              f"batch_size={ctx.cparams.n_batch}, n_seq={ctx.cparams.n_seq_max}", file=sys.stderr)
        run = kld.KldRun(base)
        print()
        print(kld.CHUNK_HEADER)
        # perplexity() wants 2*n_ctx tokens (llama.cpp's perplexity() limit), kl_divergence() has
        # no such limit: a one-chunk file gets a chunk of padding that n_chunks leaves unscored
        tokens = base.tokens + [0] * max(0, 2 * base.n_ctx - len(base.tokens))
        perplexity(ctx, tokens, base.n_ctx, base.n_chunk, on_chunk=lambda i, p: print(run.stats.chunk_line(i), flush=True),
                   on_logits=run)
    print()
    for line in run.stats.summary_lines():
        print(line)
    return 0
