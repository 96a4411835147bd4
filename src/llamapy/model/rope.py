"""Rotary position embedding, ggml conventions: each token rotated by its own position.

rope_type NORM (llama GGUFs: Q/K weights were permuted at conversion) rotates adjacent
pairs (x[2i], x[2i+1]); NEOX (gemma, qwen, ...) rotates halves (x[i], x[i + n_rot/2]).
Frequency factors (Llama 3's rope_freqs tensor, Phi-3's LongRoPE rope_factors_long/short:
ggml_rope_ext's freq_factors) divide pair i's angle by factor i.

YaRN (ggml rope_yarn, ext_factor != 0; gpt-oss): pair i's angle mixes the interpolated
freq_scale * theta and the extrapolated theta by ramp_i * ext_factor, ramp_i = 1 - clamp((i -
lo) / max(0.001, hi - lo), 0, 1) between the correction dims lo, hi (ggml_rope_yarn_corr_dims
from n_ctx_orig, beta_fast, beta_slow), and cos and sin are scaled by attn_factor * (1 + 0.1 *
ln(1 / freq_scale)); without YaRN by attn_factor alone (`rope.scaling.attn_factor`: Phi-3's
LongRoPE factor, ggml_rope_ext with ext_factor 0: mscale = attn_factor)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..kernels import ops as kops
from ..kernels.ops import row_lib
from .layers import rms_norm

ROPE_TYPE_NORM = 0
ROPE_TYPE_NEOX = 2


@dataclass(frozen=True, slots=True)
class RopeParams:
    n_rot: int
    freq_base: float
    freq_scale: float = 1.0
    rope_type: int = ROPE_TYPE_NORM
    freq_factors: tuple[float, ...] | None = None  # [n_rot/2]: pair i turns at its frequency / factor i
    ext_factor: float = 0.0  # YaRN's extrapolation mix (llama_cparams::yarn_ext_factor; 0: no YaRN)
    attn_factor: float = 1.0  # cos and sin scaled by it (yarn_attn_factor)
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    n_ctx_orig: int = 0  # n_ctx_orig_yarn

    def corr_dims(self) -> tuple[float, float]:
        """ggml_rope_yarn_corr_dims, in float32 as ggml computes them: the pairs below lo are
        extrapolated, those above hi interpolated."""
        f32 = np.float32

        def dim(beta: float) -> np.float32:
            return f32(self.n_rot) * np.log(f32(self.n_ctx_orig) / (f32(beta) * f32(2 * np.pi))) / (
                f32(2) * np.log(f32(self.freq_base)))

        return max(0.0, float(np.floor(dim(self.beta_fast)))), min(self.n_rot - 1.0, float(np.ceil(dim(self.beta_slow))))

    def yarn_mix(self) -> np.ndarray | None:
        """[n_rot/2] float64: each pair's weight of the extrapolated angle (ramp * ext_factor), or
        None without YaRN."""
        if self.ext_factor == 0.0:
            return None
        lo, hi = self.corr_dims()
        y = (np.arange(self.n_rot // 2, dtype=np.float64) - lo) / max(0.001, hi - lo)
        return (1.0 - np.clip(y, 0.0, 1.0)) * self.ext_factor

    @property
    def mscale(self) -> float:
        """The factor on cos and sin (rope_yarn's mscale)."""
        if self.ext_factor == 0.0:
            return self.attn_factor
        return self.attn_factor * (1.0 + 0.1 * float(np.log(1.0 / self.freq_scale)))


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
        mix, m = p.yarn_mix(), p.mscale
        if mix is not None:  # YaRN: the extrapolated angle (th / freq_scale) mixed in per pair
            th = th * (1.0 - mix) + (th / p.freq_scale) * mix
        return (torch.from_numpy((np.cos(th) * m).astype(np.float32)[:, None, :]),
                torch.from_numpy((np.sin(th) * m).astype(np.float32)[:, None, :]))
    inv = p.freq_base ** (-torch.arange(0, p.n_rot, 2, dtype=torch.float64, device=pos.device) / p.n_rot)  # [n_rot/2]
    if p.freq_factors is not None:
        inv = inv / torch.tensor(p.freq_factors, dtype=torch.float64, device=pos.device)
    theta = (pos.to(torch.float64)[:, None] * p.freq_scale) * inv[None, :]  # [n, n_rot/2]
    mix, m = p.yarn_mix(), p.mscale
    if mix is not None:
        mix_t = torch.from_numpy(mix).to(pos.device)
        theta = theta * (1.0 - mix_t) + (theta / p.freq_scale) * mix_t
    return (theta.cos() * m).float()[:, None, :], (theta.sin() * m).float()[:, None, :]


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


def norm_rope_qk_(q: torch.Tensor, k: torch.Tensor, qw: torch.Tensor | None, kw: torch.Tensor | None, eps: float,
                  cos: torch.Tensor, sin: torch.Tensor, p: RopeParams) -> tuple[torch.Tensor, torch.Tensor]:
    """q [n, n_head, d], k [n, n_head_kv, d] (views into the QKV product may be strided): each
    head RMS-normed by qw / kw [d] where given (Gemma 3's, Qwen 3's Q/K norms), then rotated.
    On the CPU one kernel call in place (no copy of the strided views); elsewhere new normed
    tensors, rotated.  Returns (q, k)."""
    lib = row_lib(q)
    if (lib is not None and (qw is None) == (kw is None) and q.shape[2] == k.shape[2]
            and all(t.stride(2) == 1 and t.stride(1) == t.shape[2] for t in (q, k))):
        kops.qk_norm_rope_(lib, q, k, qw, kw, eps, cos, sin, p.n_rot, p.rope_type == ROPE_TYPE_NEOX)
        return q, k
    if qw is not None:
        q, k = rms_norm(q, qw, eps), rms_norm(k, kw, eps)
    return apply_rope_(q, cos, sin, p), apply_rope_(k, cos, sin, p)
