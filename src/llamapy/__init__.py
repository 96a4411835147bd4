"""llamapy: llama.cpp's inference runtime, rebuilt in Python on PyTorch.

    model = llamapy.Model.load("smollm2-135m")
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=4096))
    batch = llamapy.Batch(); batch.add(token, pos, [0], logits=True)
    ctx.decode(batch); ctx.get_logits_ith(-1)

Names are imported on first use, so `llamapy mem` answers without importing torch's
model code paths it does not need.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"  # pyproject.toml's [project] version; tests/test_startup.py holds them equal

_EXPORTS = {
    "Batch": ".batch",
    "BatchError": ".batch",
    "UBatch": ".batch",
    "Context": ".context",
    "ContextParams": ".params",
    "KVCacheFullError": ".memory.kv_cache",
    "Llama": ".api",
    "Model": ".model.model",
    "Sampler": ".sampling",
    "SamplingParams": ".sampling",
    "estimate_memory": ".memory.estimate",
    "MemoryEstimate": ".memory.estimate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'llamapy' has no attribute '{name}'")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
