"""LoRA adapters applied beside the weights (llama.cpp's build_lora_mm, src/llama-graph.cpp):
each adapted product becomes W·x + s·B·(A·x), the base matrix untouched (quantized or not).

llama.cpp applies one set of scales to a whole context; here each ubatch row takes the scales
of its sequence (LoraState.set_rows), so requests with different adapters or scales share one
batch: the delta of adapter j is added to row i times s[i, j] (llama-server itself batches only
slots with equal adapters).  attach_loras wraps a loaded network's matrices in LoraMatrix:
the fields the architectures use for their products, matched to the base tensors they were
read from; an adapter tensor that no wrapped product reads is refused, never dropped."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass

import torch

from ..gguf.header import GGUFError
from .lora import LoraAdapter

# a layer's matrix field -> the groups of base tensors (stacked along n_out, in this order) it may have been read from
LAYER_FIELDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "wqkv": (("attn_q", "attn_k", "attn_v"), ("attn_qkv",)),
    "wo": (("attn_output",),),
    "ffn_gate_up": (("ffn_gate", "ffn_up"), ("ffn_up",)),
    "ffn_gate": (("ffn_gate",),),
    "ffn_up": (("ffn_up",),),
    "ffn_down": (("ffn_down",),),
}


@dataclass(slots=True)
class LoraState:
    """The adapters a network carries, and the current ubatch's scales per row."""

    adapters: list[LoraAdapter]
    init_scales: tuple[float, ...]  # the scales the command line gave (--lora 1, --lora-scaled S, init-without-apply 0)
    row_scales: torch.Tensor | None = None  # [n_tokens, n_adapters] float32 (None: uniform)
    out_scales: torch.Tensor | None = None  # [n_outputs, n_adapters]: the output rows' (the output matrix's input)
    uniform: tuple[float, ...] | None = None  # set when every row has the same scales (then row_scales is None)
    n_matrices: int = 0  # wrapped products (for the load line and tests)

    def set_rows(self, scales: list[tuple[float, ...]], output: list[bool], device: torch.device) -> None:
        """The ubatch's rows' scales (one tuple of n_adapters per row) and its output flags."""
        first = scales[0] if scales else ()
        if all(s == first for s in scales):
            self.uniform, self.row_scales, self.out_scales = first, None, None
        else:
            self.uniform = None
            self.row_scales = torch.tensor(scales, dtype=torch.float32, device=device)  # [n_tokens, n_adapters]
            self.out_scales = self.row_scales[torch.tensor(output, dtype=torch.bool, device=device)]

    def add_delta(self, x: torch.Tensor, y: torch.Tensor, parts: list[tuple[int, int, str]]) -> None:
        """y[:, lo:hi] += s_j · B·(A·x) for each adapter j and each part (lo, hi, base tensor)
        it adapts; x [n, n_in], y [n, n_out] float32."""
        if x.shape[0] == 0:
            return
        xf = x if x.dtype == torch.float32 else x.float()
        for j, ad in enumerate(self.adapters):
            if self.uniform is not None:
                s: float | torch.Tensor = self.uniform[j] if j < len(self.uniform) else 0.0
                if s == 0.0:
                    continue
            else:
                rows = self.row_scales if x.shape[0] == self.row_scales.shape[0] else self.out_scales
                s = rows[:, j : j + 1]  # [n, 1]: each row's (x: all the ubatch's rows, or its output rows)
                if not bool(s.any()):
                    continue
            for lo, hi, name in parts:
                w = ad.weights.get(name)
                if w is None:
                    continue
                d = (xf @ w.a.t()) @ w.b.t()  # [n, r] -> [n, hi - lo]
                y[:, lo:hi].add_(d.mul_(s * w.factor(ad.alpha)))


@dataclass(slots=True)
class LoraMatrix:
    """A product with adapters: the base matrix's output plus LoraState.add_delta over its
    parts (lo, hi, base tensor name) along n_out."""

    base: object
    parts: list[tuple[int, int, str]]
    state: LoraState

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x [n, n_in] -> [n, n_out] float32."""
        y = self.base(x)
        self.state.add_delta(x, y, self.parts)
        return y

    def add_into(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y += W·x + the adapters' deltas, in place; y [n, n_out]."""
        self.base.add_into(x, y)
        self.state.add_delta(x, y, self.parts)
        return y

    def __getattr__(self, name: str):  # n_out, nbytes, dequant, get_rows: the base matrix's
        return getattr(self.base, name)


def _parts(groups: tuple[tuple[str, ...], ...], prefix: str, shapes: dict[str, tuple[int, ...]],
           n_out: int) -> list[tuple[int, int, str]] | None:
    """The first group whose base tensors all exist and fill n_out, as (lo, hi, name) rows."""
    for g in groups:
        names = [f"{prefix}{t}.weight" for t in g]
        if all(n in shapes for n in names) and sum(shapes[n][0] for n in names) == n_out:
            out, lo = [], 0
            for n in names:
                out.append((lo, lo + shapes[n][0], n))
                lo += shapes[n][0]
            return out
    return None


def attach_loras(net, shapes: dict[str, tuple[int, ...]], adapters: list[LoraAdapter],
                 scales: tuple[float, ...]) -> LoraState:
    """Wrap net's adapted products in LoraMatrix (shapes: the base file's tensor shapes, torch
    order).  Refuses (GGUFError, nothing changed) an adapter tensor no product reads.  The
    fused C layers are turned off (they read the base matrices only), so every ubatch takes
    the per-op path."""
    state = LoraState(list(adapters), tuple(scales))
    plan: list[tuple[object, str, list[tuple[int, int, str]]]] = []
    for il, layer in zip(net.layer_ids, net.layers):
        if not is_dataclass(layer):
            continue
        for f in fields(layer):
            m = getattr(layer, f.name)
            if f.name in LAYER_FIELDS and m is not None and hasattr(m, "n_out"):
                parts = _parts(LAYER_FIELDS[f.name], f"blk.{il}.", shapes, m.n_out)
                if parts is not None:
                    plan.append((layer, f.name, parts))
    out = getattr(net, "output", None)
    if out is not None and out is not getattr(net, "tok_embd", None) and "output.weight" in shapes:
        plan.append((net, "output", [(0, shapes["output.weight"][0], "output.weight")]))
    covered = {name for _, _, parts in plan for _, _, name in parts}
    for ad in adapters:
        missed = sorted(set(ad.weights) - covered)
        if missed:
            raise GGUFError(f"--lora {ad.path}: llamapy's '{type(net).__name__}' applies no adapter to "
                            f"{', '.join(missed[:6])}{' ...' if len(missed) > 6 else ''} ({len(missed)} tensors; "
                            f"adapted: the attention and dense FFN products and the output)")
    for obj, name, parts in plan:
        if any(n in ad.weights for ad in adapters for _, _, n in parts):
            setattr(obj, name, LoraMatrix(getattr(obj, name), parts, state))
            state.n_matrices += 1
    if getattr(net, "fused", None) is not None:
        net.fused = None
    return state
