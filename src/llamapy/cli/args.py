"""The parsed command line (an argparse Namespace) as the library's typed parameters:
ContextParams, SamplingParams, GrammarSpec, PipelineParams, SpecParams; and a command's
(Model, Context).  Each reads the flags of flags.py by their dest."""
from __future__ import annotations

import argparse
import sys

from ..params import ContextParams


def resolve_device(a: argparse.Namespace) -> str:
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


def ctx_params(a: argparse.Namespace) -> ContextParams:
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
        device=resolve_device(a),
        offload_kqv=not getattr(a, "no_kv_offload", False),
        deterministic=getattr(a, "deterministic", False),
    )


def make_sampler(a: argparse.Namespace):
    from ..sampling import Sampler, SamplingParams

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


def grammar_spec(a: argparse.Namespace):
    """The run's --grammar / --grammar-file / --json-schema / --json-schema-file, or None."""
    from pathlib import Path

    from ..grammar import GrammarSpec

    if getattr(a, "grammar_file", None):
        return GrammarSpec("gbnf", Path(a.grammar_file).read_text())
    if getattr(a, "grammar", None):
        return GrammarSpec("gbnf", a.grammar)
    if getattr(a, "json_schema_file", None):
        return GrammarSpec.json_schema(Path(a.json_schema_file).read_text())
    if getattr(a, "json_schema", None):
        return GrammarSpec.json_schema(a.json_schema)
    return None


def pipe_params(a: argparse.Namespace):
    """--pp / --tensor-split / --pp-timeout as PipelineParams (checked: a split needs --pp)."""
    from ..pipeline import PipelineConfigError, PipelineParams
    from ..pipeline.split import parse_tensor_split

    pp = getattr(a, "pp", 1)
    ts = parse_tensor_split(getattr(a, "tensor_split", None))
    if ts is not None and len(ts) != pp:
        raise PipelineConfigError(f"--tensor-split has {len(ts)} parts but --pp is {pp}: give one proportion per stage")
    timeout = getattr(a, "pp_timeout", 60.0)
    if timeout <= 0:
        raise PipelineConfigError(f"--pp-timeout ({timeout:g}) must be > 0 seconds")
    return PipelineParams(pp, None if ts is None else tuple(ts), timeout)


def load_context(a: argparse.Namespace, params=None):
    """(Model, Context) for a command: one process, or stage 0 of --pp N stages."""
    from ..pipeline import open_context

    from .lora_flags import lora_specs

    return open_context(a.model, params or ctx_params(a), pipe_params(a), device=resolve_device(a), mmap=getattr(a, "mmap", None),
                        lora=lora_specs(a))


def spec_params(a: argparse.Namespace):
    from ..speculative import SpecParams

    return SpecParams(type=a.spec_type, draft_model=a.spec_draft_model, n_max=a.spec_draft_n_max,
                      n_min=a.spec_draft_n_min, p_min=a.spec_draft_p_min, ngram_size_n=a.spec_ngram_simple_size_n,
                      ngram_size_m=a.spec_ngram_simple_size_m)
