"""The `llama_kv_cache: size = ...` line llama.cpp prints when it allocates a KV cache."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..log import logger

if TYPE_CHECKING:
    from .kv_cache import KVCache

MiB = 1024 * 1024


def log_kv_size(kv: "KVCache") -> None:
    """llama_kv_cache's constructor line: cells per stream, layers, n_seq_max/n_stream, K/V MiB."""
    k, v = kv.size_k_bytes(), kv.size_v_bytes()
    logger("llama_kv_cache").info(
        f"size = {(k + v) / MiB:7.2f} MiB ({kv.size:6d} cells, {len(kv.layers):3d} layers, "
        f"{kv.n_seq_max:2d}/{kv.n_stream} seqs), "
        f"K ({kv.type_k.name}): {k / MiB:7.2f} MiB, V ({kv.type_v.name}): {v / MiB:7.2f} MiB"
    )
