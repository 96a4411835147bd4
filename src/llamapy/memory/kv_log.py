"""The `llama_kv_cache: ... KV buffer size` and `size = ...` lines llama.cpp prints when it
allocates a KV cache, and ggml's names for where a buffer lives."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..log import logger

if TYPE_CHECKING:
    from .kv_cache import KVCache

MiB = 1024 * 1024


def buffer_name(device: str | torch.device) -> str:
    """ggml's buffer-type name for a device: CPU, CUDA0, CUDA1, ..."""
    d = torch.device(device)
    return f"CUDA{d.index or 0}" if d.type == "cuda" else d.type.upper()


def log_kv_size(kv: "KVCache") -> None:
    """llama_kv_cache's constructor lines: the buffer and its device; cells per stream,
    layers, n_seq_max/n_stream, K/V MiB."""
    k, v = kv.size_k_bytes(), kv.size_v_bytes()
    logger("llama_kv_cache").info(f"{buffer_name(kv.device):>10} KV buffer size = {(k + v) / MiB:8.2f} MiB")
    logger("llama_kv_cache").info(
        f"size = {(k + v) / MiB:7.2f} MiB ({kv.size:6d} cells, {len(kv.layers):3d} layers, "
        f"{kv.n_seq_max:2d}/{kv.n_stream} seqs), "
        f"K ({kv.type_k.name}): {k / MiB:7.2f} MiB, V ({kv.type_v.name}): {v / MiB:7.2f} MiB"
    )
