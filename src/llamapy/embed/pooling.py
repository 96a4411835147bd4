"""llama_pooling_type and build_pooling (llama-graph.cpp) on one sequence's t_embd rows, and
common_embd_normalize (common/common.cpp)."""
from __future__ import annotations

import numpy as np
import torch

# llama_pooling_type: -1 unspecified (the model's, else none)
POOLING_TYPES: dict[str, int] = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}


def pooling_name(t: int) -> str:
    for k, v in POOLING_TYPES.items():
        if v == t:
            return k
    return "none"


def resolve_pooling(asked: str | None, model_pooling_type: int) -> str:
    """--pooling, else the GGUF's {arch}.pooling_type, else none (llama_context's rule)."""
    if asked in (None, "", "unspecified"):
        return pooling_name(model_pooling_type) if model_pooling_type >= 0 else "none"
    if asked not in POOLING_TYPES:
        raise ValueError(f"--pooling {asked}: not a pooling type (choose one of {', '.join(POOLING_TYPES)})")
    return asked


def pool(rows: torch.Tensor, pooling: str, head=None, causal: bool = False) -> torch.Tensor:
    """One sequence's t_embd rows [n_tokens, n_embd] in position order -> its embedding:
    none: the rows themselves; mean: their mean; cls: the first token's; last: the last
    token's; rank: the cls row (a causal model's: the last, llm_graph_input_cls) through the
    classifier head (bert: cls, cls.output; qwen3: cls.output and a softmax) -> [n_cls_out] scores."""
    if pooling == "none":
        return rows
    if pooling == "mean":
        return rows.mean(0)
    if pooling == "last":
        return rows[-1]
    x = rows[-1] if pooling == "rank" and causal else rows[0]
    if pooling == "rank":
        if head is None:
            raise ValueError("--pooling rank needs a classifier head (cls / cls.output tensors): this model has none")
        return head(x.unsqueeze(0))[0]
    return x


def embd_normalize(v: np.ndarray, embd_norm: int) -> np.ndarray:
    """common_embd_normalize over the last axis: -1 none, 0 max-abs scaled to the int16 range
    (x * 32760 / max|x|), 1 taxicab, 2 euclidean, > 2 p-norm; a zero vector stays zero."""
    x = np.asarray(v, dtype=np.float32)
    a = np.abs(x.astype(np.float64))
    if embd_norm == -1:
        s = np.ones(x.shape[:-1] + (1,))
    elif embd_norm == 0:
        s = a.max(-1, keepdims=True) / 32760.0
    elif embd_norm == 2:
        s = np.sqrt((a * a).sum(-1, keepdims=True))
    elif embd_norm > 0:
        s = np.power(np.power(a, embd_norm).sum(-1, keepdims=True), 1.0 / embd_norm)
    else:
        raise ValueError(f"--embd-normalize {embd_norm}: must be -1 (none), 0 (max absolute), 1 (taxicab), "
                         f"2 (euclidean) or a p > 2")
    norm = np.where(s > 0, 1.0 / np.where(s > 0, s, 1.0), 0.0)
    return (x * norm).astype(np.float32)
