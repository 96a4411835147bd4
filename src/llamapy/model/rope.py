"""Rotary position embedding, ggml conventions: each token rotated by its own position.

rope_type NORM (llama GGUFs: Q/K weights were permuted at conversion) rotates adjacent
pairs (x[2i], x[2i+1]); NEOX (gemma, qwen, ...) rotates halves (x[i], x[i + n_rot/2]).
Frequency factors (Llama 3's rope_freqs tensor, Phi-3's LongRoPE rope_factors_long/short:
ggml_rope_ext's freq_factors) divide pair i's angle by factor i.  An attention factor (ggml's
attn_factor, `rope.scaling.attn_factor`) multiplies cos and sin, so the rotated dimensions of Q
and K alike (ggml_rope_ext with ext_factor 0: mscale = attn_factor)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..kernels import ops as kops
from ..kernels.ops import row_lib

ROPE_TYPE_NORM = 0
ROPE_TYPE_NEOX = 2


@dataclass(frozen=True, slots=True)
class RopeParams:
    n_rot: int
    freq_base: float
    freq_scale: float = 1.0
    rope_type: int = ROPE_TYPE_NORM
    freq_factors: tuple[float, ...] | None = None  # [n_rot/2]: pair i turns at its frequency / factor i
    attn_factor: float = 1.0  # cos and sin times this (llama_cparams::yarn_attn_factor without YaRN)


def rope_cos_sin(pos: torch.Tensor, p: RopeParams) -> tuple[torch.Tensor, torch.Tensor]:
    """pos: [n] int (positions, or position deltas for a K-shift) -> cos, sin: [n, 1, n_rot/2],
    the angles in float64, rounded once to float32.  On the CPU in numpy: a decode step's row
    costs a few numpy calls instead of ten PyTorch ops (a step's Python runs with caches the
    weights' stream has just emptied, so each op costs more than its bare time)."""
    if pos.device.type == "cpu":
        inv_np = p.freq_base ** (-np.arange(0, p.n_rot, 2, dtype=np.float64) / p.n_rot)  # [n_rot/2]
        if p.freq_factors is not None:
            inv_np = inv_np / np.asarray(p.freq_factors, dtype=np.float64)
        th = (pos.numpy().astype(np.float64)[:, None] * p.freq_scale) * inv_np[None, :]  # [n, n_rot/2]
        return (torch.from_numpy((np.cos(th) * p.attn_factor).astype(np.float32)[:, None, :]),
                torch.from_numpy((np.sin(th) * p.attn_factor).astype(np.float32)[:, None, :]))
    inv = p.freq_base ** (-torch.arange(0, p.n_rot, 2, dtype=torch.float64, device=pos.device) / p.n_rot)  # [n_rot/2]
    if p.freq_factors is not None:
        inv = inv / torch.tensor(p.freq_factors, dtype=torch.float64, device=pos.device)
    theta = (pos.to(torch.float64)[:, None] * p.freq_scale) * inv[None, :]  # [n, n_rot/2]
    return (theta.cos() * p.attn_factor).float()[:, None, :], (theta.sin() * p.attn_factor).float()[:, None, :]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, p: RopeParams) -> torch.Tensor:
    """x: [n, n_head, head_dim] float32 -> rotated copy; dims past n_rot pass through.
    NORM over the whole head is one complex multiplication: adjacent pairs are (re, im)."""
    n_rot = p.n_rot
    if (p.rope_type == ROPE_TYPE_NORM and n_rot == x.shape[-1] and x.dtype == torch.float32 and x.stride(-1) == 1
            and x.storage_offset() % 2 == 0 and all(st % 2 == 0 for st in x.stride()[:-1])):  # view_as_complex's rules
        xc = torch.view_as_complex(x.unflatten(-1, (-1, 2)))  # [n, n_head, n_rot/2]
        return torch.view_as_real(xc * torch.complex(cos, sin)).flatten(-2)
    xr, rest = x[..., :n_rot], x[..., n_rot:]
    if p.rope_type == ROPE_TYPE_NEOX:
        x0, x1 = xr[..., : n_rot // 2], xr[..., n_rot // 2 :]
        out = torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    else:
        x0, x1 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
    return out if rest.shape[-1] == 0 else torch.cat((out, rest), dim=-1)


def apply_rope_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, p: RopeParams) -> torch.Tensor:
    """apply_rope in place on x [n, n_head, head_dim] (a view into the stacked QKV product, its
    heads contiguous): on the CPU the kernel's one pass; returns x."""
    lib = row_lib(x)
    if lib is not None and x.stride(2) == 1 and x.stride(1) == x.shape[2]:
        kops.rope_(lib, x, cos, sin, p.n_rot, p.rope_type == ROPE_TYPE_NEOX)
        return x
    return x.copy_(apply_rope(x, cos, sin, p))
