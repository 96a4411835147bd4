"""save_state / load_state: the Llama's cached tokens and their K/V cells, copied.

A LlamaState holds, per KV cache of the context's memory (one; two for interleaved SWA),
clones of its K and V tensors and a copy of its cells (positions, sequences), plus the
tokens those cells hold (llama-cpp-python's input_ids).  Loading it puts all of them back,
so the next request that starts with those tokens reuses them and samples what it would
have sampled right after the save."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .engine import Engine


@dataclass(slots=True)
class LlamaState:
    input_ids: list[int]
    n_tokens: int
    kv: list[dict[str, Any]] = field(default_factory=list)  # per KV cache: k, v, cells
    seed: int = 0


def _caches(memory: Any) -> list[Any]:
    caches = getattr(memory, "caches", None)  # KVCacheISWA: (base, swa)
    return [memory] if caches is None else list(caches)


def save_state(eng: Engine, seed: int) -> LlamaState:
    toks = list(eng.slot.cache_tokens)
    kv = [{"k": {il: t.clone() for il, t in c.k.items()}, "v": {il: t.clone() for il, t in c.v.items()},
           "cells": copy.deepcopy(c.cells)} for c in _caches(eng.ctx.memory)]
    return LlamaState(toks, len(toks), kv, seed)


def load_state(eng: Engine, state: LlamaState) -> None:
    caches = _caches(eng.ctx.memory)
    if len(caches) != len(state.kv):
        raise ValueError(f"load_state: the state holds {len(state.kv)} KV caches, this context {len(caches)}")
    for c, saved in zip(caches, state.kv):
        for il, t in saved["k"].items():
            c.k[il].copy_(t)
        for il, t in saved["v"].items():
            c.v[il].copy_(t)
        c.cells = copy.deepcopy(saved["cells"])
    eng.slot.cache_tokens = list(state.input_ids)
