"""The mixture-of-experts FFN (llama.cpp llama-graph.cpp build_moe_ffn, as qwen3moe and llama
with experts call it: LLM_FFN_SILU with a parallel gate, norm_w true, softmax gating, no
expert-weight scale, no biases, weights applied after the experts).

Per ubatch: router logits = x · ffn_gate_inpᵀ [n_tokens, n_expert], softmax over all experts,
the expert_used_count largest probabilities (ggml_argsort_top_k), renormalised to sum 1 (the
sum clamped below at 6.103515625e-5, as ggml_clamp there).  The rows are then grouped by
expert: each ACTIVE expert's SwiGLU runs on its rows only, through the same matrices (and C
kernels) the dense layers use, and its weighted output is scatter-added into the result.  A
one-row ubatch (decode) touches only its k experts' weights."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .layers import glu
from .qmatrix import QMatrix

W_SUM_MIN = 6.103515625e-5  # build_moe_ffn: the smallest normal F16, the weights' sum clamped to it


@dataclass(slots=True)
class MoeFFN:
    gate_inp: QMatrix  # [n_expert, n_embd]: the router (ffn_gate_inp.weight, ne [n_embd, n_expert])
    gate: list[QMatrix]  # n_expert x [n_ff_exp, n_embd] (ffn_gate_exps.weight, ne [n_embd, n_ff_exp, n_expert])
    up: list[QMatrix]  # n_expert x [n_ff_exp, n_embd]
    down: list[QMatrix]  # n_expert x [n_embd, n_ff_exp] (ffn_down_exps.weight, ne [n_ff_exp, n_embd, n_expert])
    n_expert_used: int
    norm_w: bool = True

    @property
    def n_expert(self) -> int:
        return len(self.gate)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [n_tokens, n_embd] (the normed input) -> (weights [n_tokens, k] float32, selected
        experts [n_tokens, k] int64), k = n_expert_used, largest probability first."""
        probs = self.gate_inp(x).float().softmax(-1)  # [n_tokens, n_expert]
        w, sel = probs.topk(self.n_expert_used, dim=-1)  # [n_tokens, k] each
        if self.norm_w:
            w = w / w.sum(-1, keepdim=True).clamp_min(W_SUM_MIN)
        return w, sel

    def add_into(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y [n_tokens, n_embd] += the MoE FFN of x [n_tokens, n_embd] (the normed input); returns y."""
        n_tokens, k = x.shape[0], self.n_expert_used
        w, sel = self.route(x)
        flat = sel.reshape(-1)  # [n_tokens * k]: slot i is row i // k's choice
        order = torch.argsort(flat, stable=True)  # slots grouped by expert
        counts = torch.bincount(flat, minlength=self.n_expert).tolist()  # rows per expert
        rows_all = order // k  # [n_tokens * k]: each grouped slot's row
        w_all = w.reshape(-1)[order]  # [n_tokens * k]: its weight
        out = torch.zeros(n_tokens, y.shape[1], dtype=torch.float32, device=y.device)
        pos = 0
        for e, n in enumerate(counts):
            if n == 0:  # inactive in this ubatch: its weights are not read
                continue
            rows = rows_all[pos : pos + n]  # [n] rows routed to expert e
            xe = x.index_select(0, rows) if n < n_tokens else x  # [n, n_embd] (all rows, in order, when n == n_tokens)
            h = glu(self.gate[e](xe), self.up[e](xe))  # [n, n_ff_exp]: silu(gate) * up
            ye = self.down[e](h)  # [n, n_embd]
            out.index_add_(0, rows, ye.mul_(w_all[pos : pos + n, None]))
            pos += n
        return y.add_(out)
