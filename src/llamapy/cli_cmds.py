"""The bodies of the `llamapy` subcommands (argument parsing lives in cli.py)."""
from __future__ import annotations

import argparse
import sys

from .log import setup_logging
from .params import ContextParams


def _device(a: argparse.Namespace) -> str:
    """--device, with llama.cpp's -ngl read the only way it applies to a model on one device:
    -ngl 0 keeps it on the CPU; a GPU layer count without a usable GPU is ignored with
    llama.cpp's warning (once: the answer is kept on the namespace)."""
    if getattr(a, "device_resolved", None) is None:
        ngl, a.device_resolved = getattr(a, "n_gpu_layers", "auto"), a.device
        if a.device == "auto" and ngl == 0:
            a.device_resolved = "cpu"
        elif a.device == "auto" and ngl != "auto":
            import torch

            if not torch.cuda.is_available():
                print("warning: no usable GPU found, --gpu-layers option will be ignored", file=sys.stderr)
    return a.device_resolved


def _ctx_params(a: argparse.Namespace) -> ContextParams:
    return ContextParams(
        n_ctx=a.ctx_size,
        n_batch=a.batch_size,
        n_ubatch=a.ubatch_size,
        n_seq_max=a.parallel,
        type_k=a.cache_type_k,
        type_v=a.cache_type_v,
        flash_attn=a.flash_attn,
        kv_unified=a.kv_unified,
        swa_full=getattr(a, "swa_full", False),
        mem_budget_mib=getattr(a, "mem_budget", 0.0),
        n_threads=a.threads,
        device=_device(a),
        offload_kqv=not getattr(a, "no_kv_offload", False),
    )


def _sampler(a: argparse.Namespace):
    from .sampling import Sampler, SamplingParams

    return Sampler(
        SamplingParams(
            seed=a.seed if a.seed >= 0 else 0xFFFFFFFF,
            temp=a.temp,
            top_k=a.top_k,
            top_p=a.top_p,
            min_p=a.min_p,
            penalty_repeat=a.repeat_penalty,
            penalty_last_n=a.repeat_last_n,
            penalty_present=a.presence_penalty,
            penalty_freq=a.frequency_penalty,
        )
    )


def _grammar_spec(a: argparse.Namespace):
    """The run's --grammar / --grammar-file / --json-schema / --json-schema-file, or None."""
    from pathlib import Path

    from .grammar import GrammarSpec

    if getattr(a, "grammar_file", None):
        return GrammarSpec("gbnf", Path(a.grammar_file).read_text())
    if getattr(a, "grammar", None):
        return GrammarSpec("gbnf", a.grammar)
    if getattr(a, "json_schema_file", None):
        return GrammarSpec.json_schema(Path(a.json_schema_file).read_text())
    if getattr(a, "json_schema", None):
        return GrammarSpec.json_schema(a.json_schema)
    return None


def _pipe_params(a: argparse.Namespace):
    """--pp / --tensor-split / --pp-timeout as PipelineParams (checked: a split needs --pp)."""
    from .pipeline import PipelineConfigError, PipelineParams
    from .pipeline.split import parse_tensor_split

    pp = getattr(a, "pp", 1)
    ts = parse_tensor_split(getattr(a, "tensor_split", None))
    if ts is not None and len(ts) != pp:
        raise PipelineConfigError(f"--tensor-split has {len(ts)} parts but --pp is {pp}: give one proportion per stage")
    timeout = getattr(a, "pp_timeout", 60.0)
    if timeout <= 0:
        raise PipelineConfigError(f"--pp-timeout ({timeout:g}) must be > 0 seconds")
    return PipelineParams(pp, None if ts is None else tuple(ts), timeout)


def _load(a: argparse.Namespace, params=None):
    """(Model, Context) for a command: one process, or stage 0 of --pp N stages."""
    from .pipeline import open_context

    return open_context(a.model, params or _ctx_params(a), _pipe_params(a), device=_device(a), mmap=getattr(a, "mmap", None))


def _spec_params(a: argparse.Namespace):
    from .speculative import SpecParams

    return SpecParams(type=a.spec_type, draft_model=a.spec_draft_model, n_max=a.spec_draft_n_max,
                      n_min=a.spec_draft_n_min, p_min=a.spec_draft_p_min, ngram_size_n=a.spec_ngram_simple_size_n,
                      ngram_size_m=a.spec_ngram_simple_size_m)


def _stream(model, ctx, sampler, ids: list[int], n_predict: int, out=sys.stdout, spec=None):
    from .generate import GenTimings, generate
    from .tokenizer import StreamDecoder

    tm = GenTimings()
    dec = StreamDecoder(model.tokenizer)
    for t in generate(ctx, sampler, ids, n_predict, timings=tm, spec=spec):
        out.write(dec.feed(t))
        out.flush()
    out.write(dec.flush())
    out.flush()
    return tm


def _print_perf(tm) -> None:
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
    setup_logging(verbose=True)
    sp = _spec_params(a)  # bad flags fail before anything loads
    gspec = _grammar_spec(a)
    model, ctx = _load(a)
    from .speculative import make_speculator

    spec = make_speculator(sp, model, _ctx_params(a))
    sampler = _sampler(a)
    if gspec is not None:
        from .grammar import GrammarCompiler

        sampler.grammar = GrammarCompiler(model.tokenizer, model.n_vocab).constraint(gspec)
    ids = model.tokenize(a.prompt, add_special=True, parse_special=True)
    sys.stdout.write(a.prompt)
    tm = _stream(model, ctx, sampler, ids, a.n_predict, spec=spec)
    sys.stdout.write("\n")
    print(file=sys.stderr)
    if tm.stop == "grammar":
        print(f"generation ended by the grammar: {tm.error}", file=sys.stderr)
    _print_perf(tm)
    from .context import print_memory_breakdown

    print_memory_breakdown(ctx)
    return 0


def cmd_chat(a: argparse.Namespace) -> int:
    """Each turn re-renders the conversation with the chat template, keeps the longest common
    token prefix already in the cache and decodes only the rest."""
    from .generate import common_prefix
    from .memory.factory import can_reuse_prefix

    setup_logging(verbose=a.verbose)
    model, ctx = _load(a)
    sampler = _sampler(a)
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
        ids = model.tokenize(model.tokenizer.apply_chat_template(messages, add_generation_prompt=True), add_special=True, parse_special=True)
        n_keep = common_prefix(cached, ids[:-1])  # re-decode at least one token for fresh logits
        if not can_reuse_prefix(ctx.memory, 0, n_keep):  # SWA cells of that prefix are gone
            n_keep = 0
        ctx.memory.seq_rm(0, n_keep, -1)
        buf = _Tee(sys.stdout)
        tm = _stream(model, ctx, sampler, ids[n_keep:], a.n_predict, out=buf)
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


def cmd_tokenize(a: argparse.Namespace) -> int:
    from .registry import resolve_model
    from .tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(resolve_model(a.model))  # the vocabulary only: no weights, no torch
    ids = tok.tokenize(a.prompt, add_special=not a.no_bos, parse_special=a.parse_special)
    if a.ids:
        print(ids)
    else:
        for i in ids:
            print(f"{i:6d} -> '{tok.token_to_piece(i).decode('utf-8', errors='replace')}'")
    return 0


def cmd_quantize(a: argparse.Namespace) -> int:
    """llama-quantize's output: a progress line, then its model size / quant size lines."""
    import time
    from pathlib import Path

    from .pull import StderrProgress
    from .quantize import gguf_block, quantize_file
    from .registry import resolve_model

    src, dst = resolve_model(a.input), Path(a.output)
    bar = StderrProgress()
    t0 = time.perf_counter()
    rep = quantize_file(src, dst, a.type, allow_requantize=a.allow_requantize, force=a.force,
                        progress=lambda done, total: bar("quantize", f"{src.name} -> {dst.name} as {a.type.upper()}",
                                                         done, total))
    log = "llama_model_quantize_impl"
    mib = 2.0**20
    print(f"{log}: model size  = {rep.bytes_in / mib:8.2f} MiB ({rep.bytes_in * 8 / rep.n_elements:.2f} BPW)\n"
          f"{log}: quant size  = {rep.bytes_out / mib:8.2f} MiB ({rep.bytes_out * 8 / rep.n_elements:.2f} BPW)\n"
          f"{log}: tensors: {', '.join(f'{n} {k}' for k, n in rep.counts.items())}; "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    fallbacks = [p for p in rep.plans if p.fell_back_from is not None]
    for p in fallbacks:
        print(f"warning: {p.name:<36} - ncols {p.shape[-1]:6d} not divisible by {gguf_block(p.fell_back_from):3d} "
              f"(required for type {p.fell_back_from.name.lower():>7}) -> falling back to {p.out_type.name.lower():>7}",
              file=sys.stderr)
    if fallbacks:
        print(f"{log}: WARNING: {len(fallbacks)} of {len(rep.plans)} tensor(s) required fallback quantization",
              file=sys.stderr)
    return 0


def cmd_pull(a: argparse.Namespace) -> int:
    from .registry import pull, registered_names

    if a.list or a.name is None:
        for n in registered_names():
            print(n)
        return 0
    path = pull(a.name)
    print(path)
    return 0
