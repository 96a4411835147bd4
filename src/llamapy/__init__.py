"""llamapy: llama.cpp's inference runtime, rebuilt in Python on PyTorch.

    model = llamapy.Model.load("smollm2-135m")
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=4096))
    batch = llamapy.Batch(); batch.add(token, pos, [0], logits=True)
    ctx.decode(batch); ctx.get_logits_ith(-1)
"""
from .batch import Batch, BatchError, UBatch
from .context import Context
from .memory.kv_cache import KVCacheFullError
from .model.model import Model
from .params import ContextParams

__all__ = ["Batch", "BatchError", "Context", "ContextParams", "KVCacheFullError", "Model", "UBatch"]
