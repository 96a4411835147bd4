"""`llamapy info -m FILE`: what a GGUF file is (architecture, tensor types, layers, heads,
experts, context, vocabulary) and whether llamapy runs it, from the header and the tensor
infos alone: no byte of tensor data is read, so a file cut short in its data (a download in
progress) or with garbage weights is described all the same.

The verdict runs the loader's checks in Model.load's order (the GGUF walk, the architecture,
hparams_from_gguf's keys, tensors and vocabulary keys, each tensor's ggml type) and prints the
first refusal word for word as `llamapy run` would give it."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..gguf.ftype import ftype_name
from ..gguf.header import GGUFError, GGUFHeader, TensorInfo, short_repr
from .flags import add_model

MiB = 1024 * 1024


class _HeaderOnly(GGUFHeader):
    """The header walk, tolerating tensor data past the end of the file (listed in past_end)."""

    data_may_be_short = True


@dataclass(slots=True)
class TypeCount:
    type: str
    n_tensors: int
    n_bytes: int


@dataclass(slots=True)
class FileInfo:
    path: str
    file_bytes: int
    arch: str
    name: str | None
    file_type: str
    n_tensors: int
    types: list[TypeCount]  # by bytes, largest first
    hparams: dict[str, Any]  # {arch}.* keys as the file sets them (None: absent)
    vocab: dict[str, Any]
    runs: bool
    refusal: str | None  # the loader's message where runs is False
    notes: list[str] = field(default_factory=list)


_KEYS = (("n_layer", "block_count"), ("n_ctx_train", "context_length"), ("n_embd", "embedding_length"),
         ("n_ff", "feed_forward_length"), ("n_head", "attention.head_count"), ("n_head_kv", "attention.head_count_kv"),
         ("n_embd_head_k", "attention.key_length"), ("n_rot", "rope.dimension_count"),
         ("n_expert", "expert_count"), ("n_expert_used", "expert_used_count"),
         ("n_ff_exp", "expert_feed_forward_length"), ("n_swa", "attention.sliding_window"),
         ("rope_freq_base", "rope.freq_base"), ("rope_scaling_type", "rope.scaling.type"),
         ("rope_scaling_factor", "rope.scaling.factor"),
         ("n_ctx_orig_yarn", "rope.scaling.original_context_length"))


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="what a GGUF file is and whether llamapy runs it (header only, no weights read)")
    add_model(p)
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    p.set_defaults(fn=cmd_info)


def _value(h: GGUFHeader, key: str) -> Any:
    v = h.get(key)
    return v if v is None or isinstance(v, (int, float, str, bool)) else short_repr(v)


def describe(path: str | Path) -> FileInfo:
    """The file's description and verdict (GGUFError only where the header itself is unreadable)."""
    h = _HeaderOnly(path)
    arch = h.arch
    types: dict[str, TypeCount] = {}
    for t in h.tensors.values():
        c = types.setdefault(t.qtype.name, TypeCount(t.qtype.name, 0, 0))
        c.n_tensors += 1
        c.n_bytes += t.n_bytes
    hp = {k: _value(h, f"{arch}.{g}") for k, g in _KEYS}
    tok = h.get("tokenizer.ggml.tokens")
    vocab = {"model": _value(h, "tokenizer.ggml.model"), "pre": _value(h, "tokenizer.ggml.pre"),
             "n_vocab": None if tok is None else len(tok)}
    refusal = verdict(h)
    notes = [] if not h.past_end else [f"{len(h.past_end)} of {len(h.tensors)} tensors' data lie past the end of "
                                       f"the file ({h.file_size():,} bytes): a partial download, described from its header"]
    return FileInfo(str(h.path), h.file_size(), arch, _value(h, "general.name"), ftype_name(h.get("general.file_type")),
                    len(h.tensors), sorted(types.values(), key=lambda c: -c.n_bytes), hp, vocab, refusal is None,
                    refusal, notes)


def verdict(h: _HeaderOnly) -> str | None:
    """None where Model.load would load the file; else the message it would refuse it with."""
    from ..model.arch_tensors import ARCH_TENSORS
    from ..model.hparams import hparams_from_gguf

    if h.past_end:  # GGUFFile's walk refuses the first tensor whose data the file lacks
        return str(h.past_end[0])
    if h.arch not in ARCH_TENSORS:  # archs.arch_class's message, as Model.load's _field_context prefixes it
        fld = h.fields["general.architecture"]  # (absent, the architecture is llama)
        return (f"{h.path}: metadata 'general.architecture' at byte {fld.offset}: unsupported model architecture "
                f"'{h.arch}' (supported: {', '.join(sorted(ARCH_TENSORS))})")
    try:
        hparams_from_gguf(h)
    except GGUFError as e:
        return str(e)
    return _unreadable_type(h)


def _unreadable_type(h: GGUFHeader) -> str | None:
    """The loader's message for the first tensor it would read whose ggml type it cannot
    (WeightLoader._info; the embeddings first, then the layers in file order)."""
    from ..gguf.quants import DEQUANTIZE_TYPES

    first = ("token_embd.weight", "output_norm.weight", "output.weight")
    order: list[TensorInfo] = [h.tensors[n] for n in first if n in h.tensors]
    order += [t for n, t in h.tensors.items() if n not in first]
    for info in order:
        if info.qtype not in DEQUANTIZE_TYPES:
            return (f"{h.path.name}: tensor '{info.name}' (info at byte {info.info_offset}) has ggml type "
                    f"{info.qtype.name}, which llamapy cannot read "
                    f"(supported: {', '.join(sorted(t.name for t in DEQUANTIZE_TYPES))})")
    return None


def render(fi: FileInfo) -> str:
    hp = fi.hparams
    out = [f"file: {fi.path} ({fi.file_bytes / MiB:.2f} MiB)",
           f"architecture: {fi.arch}" + (f" ({fi.name})" if fi.name else ""),
           f"file type: {fi.file_type}; {fi.n_tensors} tensors"]
    for c in fi.types:
        out.append(f"    {c.type:<8} {c.n_tensors:>6} tensor{'s' if c.n_tensors > 1 else ' '} {c.n_bytes / MiB:12.2f} MiB")
    out.append(f"layers: {hp['n_layer']}, n_embd {hp['n_embd']}, n_ff {hp['n_ff']}, heads {hp['n_head']} "
               f"(kv {hp['n_head_kv'] if hp['n_head_kv'] is not None else hp['n_head']})"
               + (f", head size {hp['n_embd_head_k']}" if hp["n_embd_head_k"] is not None else ""))
    if hp["n_expert"]:
        out.append(f"experts: {hp['n_expert']}, {hp['n_expert_used']} used per token"
                   + (f", expert n_ff {hp['n_ff_exp']}" if hp["n_ff_exp"] else ""))
    else:
        out.append("experts: none (dense FFN)")
    ctx = f"context length: {hp['n_ctx_train']}"
    if hp["rope_scaling_type"]:
        ctx += f"; RoPE scaling {hp['rope_scaling_type']}"
        if hp["rope_scaling_factor"]:
            ctx += f" x{hp['rope_scaling_factor']:g}"
        if hp["n_ctx_orig_yarn"]:
            ctx += f" (original context {hp['n_ctx_orig_yarn']})"
    if hp["n_swa"]:
        ctx += f"; sliding window {hp['n_swa']}"
    out.append(ctx)
    v = fi.vocab
    out.append(f"vocabulary: {v['n_vocab']} tokens, tokenizer.ggml.model {v['model']!r}, pre-tokenizer {v['pre']!r}")
    out += [f"note: {n}" for n in fi.notes]
    out.append("llamapy runs it: yes" if fi.runs else f"llamapy runs it: no: {fi.refusal}")
    return "\n".join(out)


def cmd_info(a: argparse.Namespace) -> int:
    from ..registry import resolve_model

    fi = describe(resolve_model(a.model))
    print(json.dumps(asdict(fi), indent=1) if a.json else render(fi))
    return 0
