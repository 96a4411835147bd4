"""The mixture-of-experts FFN (llama.cpp llama-graph.cpp build_moe_ffn, as qwen3moe and llama
with experts call it: LLM_FFN_SILU with a parallel gate, norm_w true, softmax gating, no
expert-weight scale, no biases, weights applied after the experts).

Per ubatch: router logits = x · ffn_gate_inpᵀ [n_tokens, n_expert], softmax over all experts,
the expert_used_count largest probabilities (ggml_argsort_top_k), renormalised to sum 1 (the
sum clamped below at 6.103515625e-5, as ggml_clamp there).  The rows are then grouped by
expert: each ACTIVE expert's SwiGLU runs on its rows only, through the same matrices (and C
kernels) the dense layers use, and its weighted output is scatter-added into the result.  A
one-row ubatch (decode) touches only its k experts' weights: with the C kernels, routing and the
k experts' products in one call and one parallel region (kernels/moe_row.py, kernels/c/moe.c),
else expert by expert here (_add_one); a multi-row ubatch likewise, routed here, the grouped
experts' products in one C call (kernels/c/moe_rows.c), else the loop in add_into.

gpt-oss (llm_build_openai_moe: LLM_FFN_SWIGLU_OAI_MOE, LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT,
norm_w false): biases on the router's logits and on every expert's gate, up and down products
(ggml_add_id), the top k of the logits themselves, softmaxed over those k, and ggml_swiglu_oai
for the activation: x = min(gate, 7), y = clamp(up, -7, 7), x * sigmoid(1.702 x) * (y + 1)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..kernels.moe_row import MoeRow, MoeWork, moe_row_for
from .layers import glu
from .qmatrix import QMatrix

W_SUM_MIN = 6.103515625e-5  # build_moe_ffn: the smallest normal F16, the weights' sum clamped to it
SWIGLU_OAI_ALPHA = 1.702  # build_moe_ffn's LLM_FFN_SWIGLU_OAI_MOE constants
SWIGLU_OAI_LIMIT = 7.0


def swiglu_oai(gate: torch.Tensor, up: torch.Tensor, alpha: float = SWIGLU_OAI_ALPHA,
               limit: float = SWIGLU_OAI_LIMIT) -> torch.Tensor:
    """ggml_swiglu_oai on [n, n_ff] each (overwrites both): x = min(gate, limit), y = clamp(up,
    -limit, limit), x * sigmoid(alpha x) * (y + 1)."""
    x = gate.clamp_(max=limit)
    y = up.clamp_(-limit, limit).add_(1.0)
    return x.mul_(torch.mul(x, alpha).sigmoid_()).mul_(y)


@dataclass(slots=True)
class MoeFFN:
    gate_inp: QMatrix  # [n_expert, n_embd]: the router (ffn_gate_inp.weight, ne [n_embd, n_expert])
    gate: list[QMatrix]  # n_expert x [n_ff_exp, n_embd] (ffn_gate_exps.weight, ne [n_embd, n_ff_exp, n_expert])
    up: list[QMatrix]  # n_expert x [n_ff_exp, n_embd]
    down: list[QMatrix]  # n_expert x [n_embd, n_ff_exp] (ffn_down_exps.weight, ne [n_ff_exp, n_embd, n_expert])
    n_expert_used: int
    norm_w: bool = True
    softmax_weight: bool = False  # gating: top k of the logits, softmaxed over the k (else softmax, then top k)
    oai: bool = False  # activation swiglu_oai (else silu(gate) * up)
    gate_inp_b: torch.Tensor | None = None  # [n_expert]: the router's bias (ffn_gate_inp.bias)
    gate_b: torch.Tensor | None = None  # [n_expert, n_ff_exp] (ffn_gate_exps.bias, ne [n_ff_exp, n_expert])
    up_b: torch.Tensor | None = None  # [n_expert, n_ff_exp]
    down_b: torch.Tensor | None = None  # [n_expert, n_embd]
    row_c: MoeRow | None | bool = False  # one decode row in one C call (kernels/moe_row.py); False: not looked up yet
    work: MoeWork | None = None  # the multi-row C call's bytes, shared by a model's layers (kernels/moe_row.py)

    @property
    def n_expert(self) -> int:
        return len(self.gate)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [n_tokens, n_embd] (the normed input) -> (weights [n_tokens, k] float32, selected
        experts [n_tokens, k] int64), k = n_expert_used, largest probability first."""
        logits = self.gate_inp(x).float()  # [n_tokens, n_expert]
        if self.gate_inp_b is not None:
            logits = logits + self.gate_inp_b
        if self.softmax_weight:
            w, sel = logits.topk(self.n_expert_used, dim=-1)  # [n_tokens, k] each
            w = w.softmax(-1)
        else:
            w, sel = logits.softmax(-1).topk(self.n_expert_used, dim=-1)
        if self.norm_w:
            w = w / w.sum(-1, keepdim=True).clamp_min(W_SUM_MIN)
        return w, sel

    def add_into(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y [n_tokens, n_embd] += the MoE FFN of x [n_tokens, n_embd] (the normed input); returns y."""
        n_tokens, k = x.shape[0], self.n_expert_used
        if n_tokens == 1:
            if self.row_c is False:
                self.row_c = moe_row_for(self)
            if self.row_c is not None and x.dtype == y.dtype == torch.float32 and x.is_contiguous() and y.is_contiguous():
                self.row_c.add_into(x, y)
                return y
            return self._add_one(x, y)
        w, sel = self.route(x)
        flat = sel.reshape(-1)  # [n_tokens * k]: slot i is row i // k's choice
        order = torch.argsort(flat, stable=True)  # slots grouped by expert
        counts_t = torch.bincount(flat, minlength=self.n_expert)  # [n_expert] rows per expert
        rows_all = order // k  # [n_tokens * k]: each grouped slot's row
        w_all = w.reshape(-1)[order]  # [n_tokens * k]: its weight
        if self.row_c is False:
            self.row_c = moe_row_for(self)
        if self.row_c is not None and x.dtype == y.dtype == torch.float32 and x.is_contiguous() and y.is_contiguous():
            self.row_c.add_rows(x, y, counts_t, rows_all.contiguous(), w_all.contiguous())
            return y
        counts = counts_t.tolist()
        out = torch.zeros(n_tokens, y.shape[1], dtype=torch.float32, device=y.device)
        pos = 0
        for e, n in enumerate(counts):
            if n == 0:  # inactive in this ubatch: its weights are not read
                continue
            rows = rows_all[pos : pos + n]  # [n] rows routed to expert e
            xe = x.index_select(0, rows) if n < n_tokens else x  # [n, n_embd] (all rows, in order, when n == n_tokens)
            ye = self._expert(e, xe)  # [n, n_embd]
            out.index_add_(0, rows, ye.mul_(w_all[pos : pos + n, None]))
            pos += n
        return y.add_(out)

    def _expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Expert e's FFN of x [n, n_embd] -> [n, n_embd] (unweighted)."""
        g, u = self.gate[e](x), self.up[e](x)  # [n, n_ff_exp] each
        if self.gate_b is not None:
            g, u = g.add_(self.gate_b[e]), u.add_(self.up_b[e])
        ye = self.down[e](swiglu_oai(g, u) if self.oai else glu(g, u))  # [n, n_embd]
        return ye if self.down_b is None else ye.add_(self.down_b[e])

    def _add_one(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """add_into for one row (decode): its k experts straight from one host read of the
        routing, no grouping; the weighted outputs summed in selection order, then added to y
        (build_moe_ffn's ggml_add chain over the k slots)."""
        w, sel = self.route(x)  # [1, k] each
        acc = None
        for e, we in zip(sel[0].tolist(), w[0].tolist()):
            ye = self._expert(e, x).mul_(we)  # [1, n_embd]
            acc = ye if acc is None else acc.add_(ye)
        return y.add_(acc)

