"""Embeddings: pooling of t_embd per sequence (llama.cpp's build_pooling), the normalisation
of common_embd_normalize, and the Embedder that packs many sequences into each batch."""
from __future__ import annotations

from .embedder import Embedder, EmbeddingError
from .pooling import POOLING_TYPES, embd_normalize, pooling_name, resolve_pooling

__all__ = ["Embedder", "EmbeddingError", "POOLING_TYPES", "embd_normalize", "pooling_name", "resolve_pooling"]
