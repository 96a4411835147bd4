"""Every layer of a decode ubatch in one C call (kernels/c/layers.c lp_layers), for the llama
and gemma3 layer shapes, and llama / qwen3moe layers with experts for one-row ubatches (the FFN
kernels/c/moe.c's lp_moe_row_for, where kernels/moe_row.py's C row applies): the per-op path costs more in Python dispatch and thread start-ups
(about ten kernel calls per layer, each its own OpenMP region) than its kernels compute when a
ubatch has few rows.  Same steps, same kernels as the architectures' per-op forward: the tests
compare the two.

A FusedLayers exists only when every matrix of every layer is a BlockMatrix (or a stack of
them: Q|K|V of different types) and the shapes are the ones the C code assumes; run() then
takes a ubatch when it has fewer than FAST_ROWS rows (any number under --deterministic), flash
attention is on and every cache's K and V types are ones the C attention reads (types.C_KV_TYPES: f16, or ggml's blocks of 32,
stored by the C quantizers, kernels/c/kv_quant.c: the bytes the per-op path's store writes).
Each row stores into and reads its own stream of each cache, so a ubatch over several streams
(llama-server's -np layout) is one call too.  Anything else returns False and the
per-op path runs."""
from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass, field

import torch

from ..memory.kv_cache import KVCache
from .lib import KernelLib
from .ops import FAST_ROWS, visible_cells
from .types import MAX_KV_SETS, c_kv_types

P, I64, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float


class MoeC(ctypes.Structure):
    """lp_moe (kernels/c/moe.h): one layer's router and experts (n_expert 0: a dense FFN)."""

    _fields_ = [("gate_inp", P), ("wg", P), ("wu", P), ("wd", P), ("n_expert", I64), ("k", I64), ("tg", I64),
                ("tu", I64), ("td", I64), ("sg", I64), ("su", I64), ("sd", I64), ("n_embd", I64), ("n_ff", I64)]


class LayerC(ctypes.Structure):
    """lp_layer: one layer's weights, its cache stream, its KV set and RoPE set, its experts."""

    _fields_ = [("attn_norm", P), ("ffn_norm", P), ("q_norm", P), ("k_norm", P), ("attn_post_norm", P),
                ("ffn_post_norm", P), ("wq", P), ("wk", P), ("wv", P), ("wo", P), ("wg", P), ("wu", P), ("wd", P),
                ("tq", I64), ("tk", I64), ("tv", I64), ("to", I64), ("tg", I64), ("tu", I64), ("td", I64),
                ("k", P), ("v", P), ("tck", I64), ("tcv", I64), ("kv_set", I64), ("rope_set", I64), ("moe", MoeC)]


class DimsC(ctypes.Structure):
    """lp_dims."""

    _fields_ = [("n_embd", I64), ("n_head", I64), ("n_head_kv", I64), ("d", I64), ("n_rot", I64), ("n_ff", I64),
                ("eps", F), ("attn_scale", F), ("q_scale", F), ("neox", I64), ("gelu", I64), ("det", I64)]


class RopeC(ctypes.Structure):
    _fields_ = [("cos", P), ("sin", P)]


class KvC(ctypes.Structure):
    _fields_ = [("store_cells", P), ("cell_off", P), ("mask", P), ("n_kv", I64), ("ptr", P), ("cells", P)]


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """What the C table needs of one layer, gathered by the architecture (see for_llama /
    for_gemma3): its norms (None where the shape has none), its matrices as lists of
    BlockMatrix parts (one stacked, or q, k, v / gate, up separately), its cache and RoPE set."""

    attn_norm: torch.Tensor
    ffn_norm: torch.Tensor
    qkv: list
    wo: object
    gate_up: list
    down: object
    swa: bool = False
    rope_set: int = 0
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None
    attn_post_norm: torch.Tensor | None = None
    ffn_post_norm: torch.Tensor | None = None
    moe: object = None  # kernels/moe_row.py MoeRow: the FFN is these experts (gate_up, down unused)


def _parts(m) -> list | None:
    """A matrix as its BlockMatrix parts (a StackedMatrix's, or itself), None if not blocks."""
    from ..model.block_matrix import BlockMatrix

    parts = getattr(m, "parts", [m])
    return parts if all(isinstance(p, BlockMatrix) for p in parts) else None


@dataclass(slots=True)
class FusedLayers:
    lib: KernelLib
    layers: ctypes.Array  # LayerC [n_layer]; k, v rebound when the caches or streams change
    dims: DimsC
    n_layer: int
    swa: list[bool]  # per layer: reads the sliding-window mask
    layer_ids: list[int]  # the model's layer index of each table entry (a pipeline stage's own range)
    bound: tuple = ()  # (cache ids, weakrefs to the caches) the table's k, v point into now
    calls: int = 0  # forwards that took this path (the tests check it was taken)
    keep: list = field(default_factory=list)  # the tensors the table points into
    det_covered: bool = False  # every matrix has rows_det_x86.c's product (multi-row --deterministic ubatches)
    moe: bool = False  # MoE layers: one-row ubatches only (lp_moe_row_for), not under --deterministic

    @classmethod
    def build(cls, hp, specs: list[LayerSpec], lib: KernelLib | None, q_scale: float, attn_scale: float, neox: bool,
              gelu: bool, layer_ids: list[int] | None = None) -> "FusedLayers | None":
        """The table for these layers (the model's layers layer_ids, default all), or None when
        some matrix is not in blocks or the shapes are not the ones the C code assumes (equal K
        and V head sizes, an even n_rot <= d)."""
        if lib is None or hp.n_embd_head_k != hp.n_embd_head_v or hp.n_rot > hp.n_embd_head_k or hp.n_rot % 2:
            return None
        d = hp.n_embd_head_k
        n_q, n_k = hp.n_head * d, hp.n_head_kv * d
        arr = (LayerC * len(specs))()
        keep: list = []
        n_ff = None
        det_covered = True
        for il, s in enumerate(specs):
            qkv = [p for m in s.qkv for p in (_parts(m) or [None])]
            o = _parts(s.wo)
            if s.moe is not None:
                if s.ffn_post_norm is not None or s.moe.n_embd != hp.n_embd:
                    return None
                gu, dn, n_ff, det_covered = [], [], s.moe.n_ff, False
            else:
                gu = [p for m in s.gate_up for p in (_parts(m) or [None])]
                dn = _parts(s.down)
                if None in gu or dn is None or len(dn) != 1:
                    return None
                n_ff = dn[0].n_in
            if None in qkv or o is None or len(o) != 1:
                return None
            det_covered = det_covered and all(p.det_covered for p in qkv + gu + o + dn)
            if not _shapes_fit(qkv, gu or None, o[0], dn[0] if dn else None, hp.n_embd, n_q, n_k, n_ff):
                return None
            c = arr[il]
            norms = {}
            for name in ("attn_norm", "ffn_norm", "q_norm", "k_norm", "attn_post_norm", "ffn_post_norm"):
                t = getattr(s, name)
                if t is not None:
                    t = t.float().contiguous()
                    keep.append(t)
                    norms[name] = t.data_ptr()
                setattr(c, name, norms.get(name))
            c.wq, c.tq = qkv[0].blocks.data_ptr(), int(qkv[0].qtype)
            if len(qkv) == 3:
                c.wk, c.tk = qkv[1].blocks.data_ptr(), int(qkv[1].qtype)
                c.wv, c.tv = qkv[2].blocks.data_ptr(), int(qkv[2].qtype)
            if s.moe is not None:
                r = s.moe
                c.moe = MoeC(r.gate_inp.data_ptr(), *r.bases, r.n_expert, r.k, *r.types, *r.strides, r.n_embd, r.n_ff)
                keep.append(r)
            else:
                c.wg, c.tg = gu[0].blocks.data_ptr(), int(gu[0].qtype)
                if len(gu) == 2:
                    c.wu, c.tu = gu[1].blocks.data_ptr(), int(gu[1].qtype)
                c.wd, c.td = dn[0].blocks.data_ptr(), int(dn[0].qtype)
            c.wo, c.to = o[0].blocks.data_ptr(), int(o[0].qtype)
            c.rope_set = s.rope_set
        dims = DimsC(hp.n_embd, hp.n_head, hp.n_head_kv, d, hp.n_rot, n_ff, hp.f_norm_rms_eps, attn_scale, q_scale,
                     int(neox), int(gelu), 0)
        ids = list(range(len(specs))) if layer_ids is None else list(layer_ids)
        moe = any(s.moe is not None for s in specs)
        return cls(lib, arr, dims, len(specs), [s.swa for s in specs], ids, keep=keep, det_covered=det_covered, moe=moe)

    def det_ok(self, type_k: str, type_v: str) -> bool:
        """Can --deterministic ubatches of several rows (each row as if alone) take this path:
        every matrix covered and caches of these types read by the C attention?"""
        return self.det_covered and c_kv_types(type_k, type_v, self.dims.d, self.dims.d) is not None

    def run(self, inp, caches: list, x: torch.Tensor, ropes: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
        """x [n_tokens, n_embd] float32 through every layer, in place, when this ubatch fits the
        fused path (see the module doc); False (nothing done) otherwise.  caches: each layer's
        KVCache, in table order; ropes: (cos, sin) [n_tokens, 1, n_rot/2] of each RoPE set."""
        n = x.shape[0]
        few = n < FAST_ROWS or inp.deterministic  # --deterministic: any rows (each as if alone)
        if self.moe and (n != 1 or inp.deterministic):  # experts: one row (decode), model/moe.py's paths else
            return self._declined(inp, n)
        if n == 0 or not few or x.device.type != "cpu" or not inp.flash_attn:
            return self._declined(inp, n)
        # --deterministic's products only where rows_det_x86.c has every matrix's type; else the
        # ubatch is one row (Context._det_rows) and takes the default one-row products
        if inp.deterministic and n > 1 and not self.det_covered:
            return self._declined(inp, n)
        self.dims.det = int(inp.deterministic and self.det_covered)
        sets: dict[tuple[int, bool], int] = {}
        kvs, keep = [], []
        d = self.dims.d
        for il, cache in enumerate(caches):
            if not isinstance(cache, KVCache) or c_kv_types(cache.type_k.name, cache.type_v.name, d, d) is None:
                return self._declined(inp, n)
            key = (id(cache), self.swa[il])
            if key not in sets and len(sets) == MAX_KV_SETS:  # layers.c's bound (an iSWA model has 2)
                return self._declined(inp, n)
            if key not in sets:
                kv, held = _kv_set(inp, cache, self.swa[il], n)
                keep += held
                sets[key] = len(kvs)
                kvs.append(kv)
            self.layers[il].kv_set = sets[key]
        self._bind(caches)
        rope_arr = (RopeC * len(ropes))()
        for i, (cos, sin) in enumerate(ropes):
            cos, sin = cos.contiguous(), sin.contiguous()
            keep += [cos, sin]
            rope_arr[i] = RopeC(cos.data_ptr(), sin.data_ptr())
        kv_arr = (KvC * len(kvs))(*kvs)
        work = self._work(inp, n, kv_arr, len(kvs))
        rc = self.lib.fn.lp_layers(self.layers, self.n_layer, ctypes.byref(self.dims), x.data_ptr(), n, rope_arr,
                                   kv_arr, len(kvs), None if work is None else work.data_ptr(),
                                   0 if work is None else work.numel() * 4)
        if rc == -3:
            raise ValueError(f"lp_layers: a ubatch of {n} rows through expert layers (one row only)")
        if rc == -2:
            raise ValueError("lp_layers: a cache type the kernels do not store (kernels/types.py C_KV_TYPES)")
        if rc == -4:
            raise ValueError("lp_layers: --deterministic products for a matrix type rows_det_x86.c does not cover "
                             "(lp_mm_det_covers)")
        if rc != 0:
            raise MemoryError(f"lp_layers: no scratch memory for a ubatch of {n} rows")
        self.calls += 1
        return True

    def _work(self, inp, n: int, kv_arr: ctypes.Array, n_sets: int) -> torch.Tensor | None:
        """The call's working region (lp_layers_work_bytes: its floats, prepared rows) from the
        context's kept buffer (model/work.py) where it reaches glibc's mmap threshold, else None (the
        C code mallocs it: the heap reuses those bytes).  Asked in the calling thread: the sizes
        depend on its OpenMP thread count."""
        if inp.work is None:
            return None
        need = self.lib.fn.lp_layers_work_bytes(self.layers, self.n_layer, ctypes.byref(self.dims), n, kv_arr, n_sets)
        return inp.work.take_bytes(need) if need > 0 else None  # need < 0: lp_layers reports the error

    @staticmethod
    def _declined(inp, n: int) -> bool:
        """False (the per-op path takes the ubatch), but never for a --deterministic ubatch of
        several rows: the per-op path would not compute its rows as if alone."""
        if inp.deterministic and n > 1:
            raise RuntimeError(f"--deterministic: a ubatch of {n} rows the fused layers cannot take (Context._det_rows)")
        return False

    def _bind(self, caches: list) -> None:
        """Point every layer's k, v at its cache's tensors [n_stream, n_cells, width] (a KVCache
        allocates them once, so they move only with another cache), with their storage types."""
        key = tuple(id(c) for c in caches)
        if self.bound and self.bound[0] == key and all(r() is c for r, c in zip(self.bound[1], caches)):
            return
        for i, (il, cache) in enumerate(zip(self.layer_ids, caches)):
            k, v = cache.k[il], cache.v[il]
            assert k.is_contiguous() and v.is_contiguous()
            self.layers[i].k, self.layers[i].v = k.data_ptr(), v.data_ptr()
            self.layers[i].tck, self.layers[i].tcv = c_kv_types(cache.type_k.name, cache.type_v.name, self.dims.d,
                                                                self.dims.d)
        self.bound = (key, [weakref.ref(c) for c in caches])


def _kv_set(inp, cache: KVCache, swa: bool, n: int) -> tuple[KvC, list[torch.Tensor]]:
    """The C view of how the ubatch's n rows store into and read `cache`: each row's cell, the
    first cell of its stream in the layer tensors [n_stream * size cells], and its mask row and
    visible cells -- one mask [n, max n_kv] whose row i is row i's own stream's (-inf past that
    stream's n_kv), so rows of several streams (llama-server's -np) go through one call.  Also
    the tensors it points into."""
    groups = inp.groups(cache, swa, gather=False)
    size = cache.k[cache.layers[0]].shape[1]  # cells per stream
    idxs = inp.sinfo[id(cache)].idxs
    cells = torch.from_numpy(idxs.astype("int64", copy=False))  # [n]
    cell_off = torch.empty(n, dtype=torch.int64)
    if len(groups) == 1:
        g = groups[0]
        mask = g.mask.contiguous()
        ptr, vis = g.visible
        cell_off.fill_(g.stream * size)
    else:
        mask = torch.full((n, max(g.n_kv for g in groups)), float("-inf"))
        for g in groups:
            mask[g.rows, : g.n_kv] = g.mask
            cell_off[g.rows] = g.stream * size
        ptr, vis = visible_cells(mask)
    kv = KvC(cells.data_ptr(), cell_off.data_ptr(), mask.data_ptr(), mask.shape[1], ptr.data_ptr(), vis.data_ptr())
    return kv, [cells, cell_off, mask, ptr, vis]


def _shapes_fit(qkv: list, gu: list | None, o, dn, n_embd: int, n_q: int, n_k: int, n_ff: int) -> bool:
    """The matrices have the shapes lp_layers assumes (stacked or separate)."""
    if len(qkv) == 1:
        ok_qkv = (qkv[0].n_out, qkv[0].n_in) == (n_q + 2 * n_k, n_embd)
    else:
        ok_qkv = len(qkv) == 3 and [(m.n_out, m.n_in) for m in qkv] == [(n_q, n_embd), (n_k, n_embd), (n_k, n_embd)]
    if gu is None:  # experts (kernels/moe_row.py checked their shapes)
        return ok_qkv and (o.n_out, o.n_in) == (n_embd, n_q)
    if len(gu) == 1:
        ok_gu = (gu[0].n_out, gu[0].n_in) == (2 * n_ff, n_embd)
    else:
        ok_gu = len(gu) == 2 and [(m.n_out, m.n_in) for m in gu] == [(n_ff, n_embd), (n_ff, n_embd)]
    return ok_qkv and ok_gu and (o.n_out, o.n_in) == (n_embd, n_q) and (dn.n_out, dn.n_in) == (n_embd, n_ff)
