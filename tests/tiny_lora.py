"""Tiny LoRA adapter GGUFs in convert_lora_to_gguf.py's layout, for a base model written by
tests/tiny_family.py: general.type "adapter", adapter.type "lora", adapter.lora.alpha, and per
adapted base tensor W [n_out, n_in] the pair W.lora_a [r, n_in] and W.lora_b [n_out, r]
(ggml ne [n_in, r] and [r, n_out])."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from llamapy.gguf.reader import GGUFFile

LAYER_TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def write_tiny_lora(path: Path, base: Path, rank: int = 4, alpha: float = 8.0, seed: int = 1,
                    targets: tuple[str, ...] = LAYER_TARGETS, output: bool = True, std: float = 0.25,
                    dtype: type = np.float16, arch: str | None = None, general_type: str = "adapter",
                    extra: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None) -> Path:
    """An adapter on base's `targets` of every layer (and output.weight when the base has one and
    `output`): A ~ N(0, std²/n_in)·sqrt(n_in)... scaled so each B·A·x is about std of x's size.
    arch / general_type: override the keys (refusal tests); extra: name -> (A shape, B shape)
    written as they are (shape-mismatch tests)."""
    rng = np.random.default_rng(seed)
    f = GGUFFile(base)
    w = gguf.GGUFWriter(str(path), arch or f.arch)
    w.add_type(general_type)
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    names = [n for n in f.tensors if n.endswith(".weight") and n.split(".")[-2] in targets and n.startswith("blk.")]
    if output and "output.weight" in f.tensors:
        names.append("output.weight")
    for name in sorted(names):
        n_out, n_in = f.tensors[name].shape
        a = rng.standard_normal((rank, n_in)) / np.sqrt(n_in)  # [r, n_in]: A·x ~ |x| / sqrt(n_in) per element
        b = rng.standard_normal((n_out, rank)) * std / np.sqrt(rank)  # [n_out, r]
        w.add_tensor(name + ".lora_a", a.astype(dtype))
        w.add_tensor(name + ".lora_b", b.astype(dtype))
    for name, (sa, sb) in (extra or {}).items():
        w.add_tensor(name + ".lora_a", rng.standard_normal(sa).astype(np.float32))
        w.add_tensor(name + ".lora_b", rng.standard_normal(sb).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
