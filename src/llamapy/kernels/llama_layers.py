"""All layers of an LLM_ARCH_LLAMA forward in one C call (cpu_kernels.c lp_llama_layers) for
the few-row ubatches of decode, where the per-op path costs more in Python dispatch and
thread start-ups (about ten kernel calls per layer, each its own OpenMP region) than its
kernels compute.  Same steps, same kernels, same arithmetic as llama.py's per-op path: the
tests compare the two.

A FusedLlama exists only when every matrix of every layer is a BlockMatrix (Q4_0 / Q4_1 /
Q8_0 weights and the kernels loaded); run() then takes a ubatch when it has fewer than
FAST_ROWS rows, flash attention is on, the KV cache is f16 and the ubatch writes and reads
one stream.  Anything else returns False and the per-op path runs."""
from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass, field

import torch

from ..memory.kv_cache import KVCache
from .build import KernelLib
from .ops import FAST_ROWS

P, I64, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float


class LayerC(ctypes.Structure):
    """lp_llama_layer: one layer's weights and its cache stream."""

    _fields_ = [("attn_norm", P), ("ffn_norm", P), ("wqkv", P), ("wo", P), ("ffn_gate_up", P), ("ffn_down", P),
                ("t_qkv", I64), ("t_o", I64), ("t_gate_up", I64), ("t_down", I64), ("k", P), ("v", P)]


class DimsC(ctypes.Structure):
    """lp_llama_dims."""

    _fields_ = [("n_embd", I64), ("n_head", I64), ("n_head_kv", I64), ("d", I64), ("n_rot", I64), ("n_ff", I64),
                ("eps", F), ("scale", F), ("neox", I64)]


@dataclass(slots=True)
class FusedLlama:
    lib: KernelLib
    layers: ctypes.Array  # LayerC [n_layer]; k, v rebound when the cache stream changes
    dims: DimsC
    n_layer: int
    bound: tuple = ()  # (weakref to the cache, stream) the table's k, v point into now
    calls: int = 0  # forwards that took this path (the tests check it was taken)
    keep: list = field(default_factory=list)  # the tensors the table points into

    @classmethod
    def build(cls, model, lib: KernelLib | None) -> "FusedLlama | None":
        """The table for `model` (a LlamaModel), or None when some matrix is not a BlockMatrix
        or the shapes are not the ones the C code assumes."""
        from ..model.block_matrix import BlockMatrix

        hp = model.hp
        if lib is None or hp.n_embd_head_k != hp.n_embd_head_v or hp.n_rot > hp.n_embd_head_k or hp.n_rot % 2:
            return None
        d, n_ff = hp.n_embd_head_k, model.layers[0].ffn_down.n_in
        n_q, n_k = hp.n_head * d, hp.n_head_kv * d
        shapes = [(n_q + 2 * n_k, hp.n_embd), (hp.n_embd, n_q), (2 * n_ff, hp.n_embd), (hp.n_embd, n_ff)]
        arr = (LayerC * hp.n_layer)()
        keep: list = []
        for il, L in enumerate(model.layers):
            mats = (L.wqkv, L.wo, L.ffn_gate_up, L.ffn_down)
            if not all(isinstance(m, BlockMatrix) for m in mats) or [(m.n_out, m.n_in) for m in mats] != shapes:
                return None
            norms = [t.float().contiguous() for t in (L.attn_norm, L.ffn_norm)]
            keep += norms
            c = arr[il]
            c.attn_norm, c.ffn_norm = (t.data_ptr() for t in norms)
            c.wqkv, c.wo, c.ffn_gate_up, c.ffn_down = (m.blocks.data_ptr() for m in mats)
            c.t_qkv, c.t_o, c.t_gate_up, c.t_down = (int(m.qtype) for m in mats)
        dims = DimsC(hp.n_embd, hp.n_head, hp.n_head_kv, d, hp.n_rot, n_ff,
                     hp.f_norm_rms_eps, 1.0 / d**0.5, int(model.rope_type != 0))
        return cls(lib, arr, dims, hp.n_layer, keep=keep)

    def run(self, inp, cache, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
        """x [n_tokens, n_embd] float32 through every layer, in place, when this ubatch fits the
        fused path (see the module doc); False (nothing done) otherwise."""
        n = x.shape[0]
        if (n == 0 or n >= FAST_ROWS or not isinstance(cache, KVCache) or x.device.type != "cpu" or not inp.flash_attn
                or not cache.type_k.name == cache.type_v.name == "f16" or cache.layers != list(range(self.n_layer))):
            return False
        groups = inp.groups(cache, False, gather=False)
        if len(groups) != 1:
            return False
        g = groups[0]
        st = g.stream
        self._bind(cache, st)
        store_cells = torch.from_numpy(inp.sinfo[id(cache)].idxs.astype("int64", copy=False))  # [n]
        ptr, cells = g.visible
        mask = g.mask.contiguous()
        cos, sin = cos.contiguous(), sin.contiguous()
        rc = self.lib.fn.lp_llama_layers(self.layers, self.n_layer, ctypes.byref(self.dims), x.data_ptr(), n,
                                         cos.data_ptr(), sin.data_ptr(), store_cells.data_ptr(), mask.data_ptr(),
                                         g.n_kv, ptr.data_ptr(), cells.data_ptr())
        if rc != 0:
            raise MemoryError(f"lp_llama_layers: no scratch memory for a ubatch of {n} rows")
        self.calls += 1
        return True

    def _bind(self, cache, st: int) -> None:
        """Point every layer's k, v at stream st of the cache (a KVCache allocates its tensors once,
        so they move only with another cache or stream)."""
        if self.bound and self.bound[0]() is cache and self.bound[1] == st:
            return
        for il in range(self.n_layer):
            k, v = cache.k[il][st], cache.v[il][st]
            assert k.is_contiguous() and v.is_contiguous() and k.dtype == v.dtype == torch.float16
            self.layers[il].k, self.layers[il].v = k.data_ptr(), v.data_ptr()
        self.bound = (weakref.ref(cache), st)
