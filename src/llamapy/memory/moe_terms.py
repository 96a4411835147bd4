"""The mixture-of-experts FFN's temporaries for memory/estimate.py's compute terms (model/moe.py
add_into, one ubatch of n_t = min(n_ctx, n_ubatch) rows: the routing buffers scale with -ub).

Each active expert's products run on its rows only (at most n_t), so the dense FFN's terms
at the expert width (ffn_width) bound an expert's gate, up and activation; these are the rest:
the router's logits and softmax [n_t, n_expert], the top-k weights and choices [n_t, k], the
grouping indices [n_t * k], one expert's gathered input and down product [n_t, n_embd], and
the weighted sum [n_t, n_embd]; and the C path's working bytes (memory/moe_work.py).  Torch-free."""
from __future__ import annotations

from .moe_work import moe_work_terms

F32, I64 = 4, 8


def ffn_width(hp) -> int:
    """The FFN products' width: one expert's (n_ff_exp) in an MoE model, else n_ff."""
    return hp.n_ff_exp if hp.n_expert else hp.n_ff


def moe_ffn_terms(hp, n_t: int, blocks: bool = False, n_threads: int = 1) -> list[tuple]:
    """ComputeTerm fields (name, shape, phase, bytes per element[, call]) of the MoE FFN's
    routing and combining buffers, and with the block kernels (blocks) the multi-row C call's
    MoeWork and scratch (memory/moe_work.py); none for a dense model."""
    if not hp.n_expert:
        return []
    k = hp.n_expert_used
    terms = [("ffn_moe_logits", (n_t, hp.n_expert), F32), ("ffn_moe_probs", (n_t, hp.n_expert), F32),
             ("ffn_moe_weights (top-k, normed)", (2, n_t, k), F32), ("ffn_moe_topk (selected experts)", (n_t, k), I64),
             ("ffn_moe_grouping (order, rows)", (3, n_t * k), I64), ("ffn_moe_weights (grouped)", (n_t * k,), F32),
             ("ffn_moe_x (one expert's rows)", (n_t, hp.n_embd), F32),
             ("ffn_moe_down (one expert)", (n_t, hp.n_embd), F32), ("ffn_moe_out", (n_t, hp.n_embd), F32)]
    return [(name, shape, "ffn", size) for name, shape, size in terms] + moe_work_terms(hp, n_t, blocks, n_threads)
