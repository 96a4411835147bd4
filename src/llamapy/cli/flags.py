"""The flag groups several `llamapy` subcommands share, with llama.cpp's spellings and
defaults: the model, the context (-c, -b, -ub, -np, KV types, devices), the pipeline (--pp),
sampling, speculative decoding and grammars.  Each add_* adds its flags to one subparser."""
from __future__ import annotations

import argparse


def add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", default=None, help="registered model name or path to a .gguf (default: smollm2-135m)")


def gpu_layers(v: str) -> str | int:
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


def add_context(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--mem-budget", type=float, default=0.0, help="MiB that -c 0 is fitted under; with serve, the context and --cache-ram's prompt cache together (default: free memory minus 1 GiB)")
    p.add_argument("-t", "--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (CUDA when available)")
    p.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", dest="n_gpu_layers", default="auto", type=gpu_layers,
                   help="llama.cpp's layers in VRAM: N, auto or all (default: auto).  llamapy places the whole model "
                        "on one device: 0 means --device cpu; any other value leaves the choice to --device")
    p.add_argument("-nkvo", "--no-kv-offload", action="store_true",
                   help="CUDA: keep the KV cache (and attention) in host memory; saves device memory, costs speed")
    add_deterministic(p)
    add_pipeline(p)


def add_deterministic(p: argparse.ArgumentParser) -> None:
    p.add_argument("--deterministic", action="store_true",
                   help="each row's logits bit-identical whatever shares its batch (every row its own ubatch; "
                        "slower prompts; also LLAMAPY_DETERMINISTIC=1; docs/deterministic.md)")


def add_pipeline(p: argparse.ArgumentParser) -> None:
    """Pipeline stages (pipeline/): the layers split across processes over torch.distributed."""
    p.add_argument("--pp", type=int, default=1,
                   help="pipeline stages: the model's layers split across this many processes (gloo); "
                        "under torchrun, the world size (default: 1)")
    p.add_argument("-ts", "--tensor-split", default=None,
                   help="layers per stage in proportion, e.g. 3,1 (with --pp; default: equal)")
    p.add_argument("--pp-timeout", type=float, default=60.0,
                   help="seconds stage 0 waits for another stage before failing its requests (default: 60)")


def add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temp", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--repeat-last-n", type=int, default=64)
    p.add_argument("--presence-penalty", type=float, default=0.0)
    p.add_argument("--frequency-penalty", type=float, default=0.0)
    p.add_argument("-s", "--seed", type=int, default=-1, help="RNG seed (-1: random)")


def add_speculative(p: argparse.ArgumentParser) -> None:
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


def add_grammar(p: argparse.ArgumentParser) -> None:
    """llama.cpp's constrained-sampling flags (common/arg.cpp); one of them at a time."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--grammar", default=None, help="GBNF grammar the output must match")
    g.add_argument("--grammar-file", default=None, help="file with a GBNF grammar")
    g.add_argument("-j", "--json-schema", default=None,
                   help='JSON Schema the output must match, e.g. \'{"type": "object"}\' for any JSON object')
    g.add_argument("-jf", "--json-schema-file", default=None, help="file with a JSON Schema")


def add_embedding(p: argparse.ArgumentParser, switch: bool = True) -> None:
    """llama.cpp's embedding flags (common/arg.cpp): --embedding, --pooling, --embd-normalize."""
    if switch:
        p.add_argument("--embedding", "--embeddings", dest="embedding", action="store_true",
                       help="serve embeddings (/embedding, /v1/embeddings) instead of completions")
        p.add_argument("--reranking", "--rerank", dest="reranking", action="store_true",
                       help="serve reranking (/rerank, /v1/rerank): --embedding with --pooling rank")
    p.add_argument("--pooling", default=None, choices=("none", "mean", "cls", "last", "rank"),
                   help="pooling of the token embeddings (default: the model's {arch}.pooling_type, else none)")
    p.add_argument("--embd-normalize", type=int, default=2,
                   help="normalisation of the embeddings: -1 none, 0 max absolute (int16 range), 1 taxicab, "
                        "2 euclidean, >2 p-norm (default: 2)")
