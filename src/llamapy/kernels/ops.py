"""Torch-facing calls of the small CPU kernels the decode path fuses (kernels/c/):
each takes tensors, checks what the C code assumes (CPU, float32 / float16, the strides it
reads), allocates the output and passes pointers.  `fast_lib(x)` is the gate of the few-row
kernels (attention over an f16 cache, the fused layers); `row_lib(x)` that of the row-wise
ones, which split any number of rows among their threads."""
from __future__ import annotations

import numpy as np
import torch

from .build import load_kernels
from .lib import KernelLib

from .types import C_KV_TYPES, FAST_ROWS  # ubatches of fewer rows take the fused kernels


def fast_lib(x: torch.Tensor) -> KernelLib | None:
    """The kernels when x (float32, on the CPU) is a few-row activation they should handle."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or x.shape[0] >= FAST_ROWS:
        return None
    return load_kernels()


def row_lib(x: torch.Tensor) -> KernelLib | None:
    """The kernels for a row-wise op (RMS norm, GLU, RoPE) on x (float32, on the CPU) of any
    row count: one call whose threads split the rows, where PyTorch takes several passes over
    the tensor (its CPU rms_norm is five ops; a 512-row Gemma 3 ubatch spent ~30% of its
    prefill in such elementwise passes)."""
    if x.device.type != "cpu" or x.dtype != torch.float32:
        return None
    return load_kernels()


def rms_norm(lib: KernelLib, x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x: [n, n_embd] -> x / sqrt(mean(x^2) + eps) * w, a new tensor."""
    x = x.contiguous()
    out = torch.empty_like(x)
    lib.fn.lp_rms_norm(x.data_ptr(), None if w is None else w.contiguous().data_ptr(), x.shape[0], x.shape[1], eps,
                       out.data_ptr())
    return out


def glu(lib: KernelLib, gate: torch.Tensor, up: torch.Tensor, gelu: bool = False) -> torch.Tensor:
    """gate, up: [n, n_ff] (rows contiguous, any row stride) -> act(gate) * up [n, n_ff]."""
    gate, up = (t if t.stride(1) == 1 else t.contiguous() for t in (gate, up))
    n, n_ff = gate.shape
    out = torch.empty(n, n_ff, dtype=torch.float32)
    lib.fn.lp_glu_rows(gate.data_ptr(), gate.stride(0), up.data_ptr(), up.stride(0), n, n_ff, int(gelu), out.data_ptr())
    return out


def rope_(lib: KernelLib, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_rot: int, neox: bool) -> None:
    """x: [n, n_head, d] float32 whose heads are contiguous (rows may be strided, as a view of
    the stacked QKV product), rotated in place; cos, sin: [n, 1, n_rot/2]."""
    n, n_head, d = x.shape
    assert x.stride(2) == 1 and x.stride(1) == d, "rope_: heads must be contiguous within a row"
    cos, sin = cos.contiguous(), sin.contiguous()
    lib.fn.lp_rope(x.data_ptr(), n, x.stride(0), n_head, d, n_rot, cos.data_ptr(), sin.data_ptr(), int(neox))


def qk_norm_rope_(lib: KernelLib, q: torch.Tensor, k: torch.Tensor, qw: torch.Tensor | None, kw: torch.Tensor | None,
                  eps: float, cos: torch.Tensor, sin: torch.Tensor, n_rot: int, neox: bool) -> None:
    """q [n, n_head, d], k [n, n_head_kv, d] float32 (heads contiguous; rows may be strided, as
    views of the QKV product): each head RMS-normed by qw / kw [d] (None: not normed), then
    rotated; in place, one call.  cos, sin: [n, 1, n_rot/2]."""
    n, n_head, d = q.shape
    assert all(t.stride(2) == 1 and t.stride(1) == d for t in (q, k)), "qk_norm_rope_: heads must be contiguous"
    cos, sin = cos.contiguous(), sin.contiguous()
    qw, kw = (None if w is None else w.contiguous() for w in (qw, kw))
    lib.fn.lp_qk_norm_rope(q.data_ptr(), q.stride(0), n_head, k.data_ptr(), k.stride(0), k.shape[1], n, d,
                           None if qw is None else qw.data_ptr(), None if kw is None else kw.data_ptr(), eps, n_rot,
                           cos.data_ptr(), sin.data_ptr(), int(neox))


def rms_norm_add_(lib: KernelLib, x: torch.Tensor, w: torch.Tensor | None, eps: float, acc: torch.Tensor) -> torch.Tensor:
    """acc [n, n_embd] (contiguous) += rms_norm(x) * w; x [n, n_embd] (rows contiguous) is
    overwritten by its norm.  Returns acc."""
    assert x.stride(1) == 1 and acc.is_contiguous() and x.shape == acc.shape
    lib.fn.lp_rms_norm_add(x.data_ptr(), x.stride(0), None if w is None else w.contiguous().data_ptr(), x.shape[0],
                           x.shape[1], eps, acc.data_ptr())
    return acc


def visible_cells(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The cells each row of a KQ mask [n, n_kv] can see, as (ptr [n + 1], cells [nnz]) int64:
    row i's are cells[ptr[i]:ptr[i + 1]], ascending.  Built once per ubatch."""
    return visible_cells_np((mask != float("-inf")).numpy())


def visible_cells_np(visible: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """visible_cells of the mask rule's bool [n, n_kv] (True: the row sees the cell)."""
    _, cells = np.nonzero(visible)
    ptr = np.zeros(visible.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.count_nonzero(visible, axis=1), out=ptr[1:])
    return torch.from_numpy(ptr), torch.from_numpy(np.ascontiguousarray(cells, dtype=np.int64))  # nonzero: a strided view


def _attn_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_head_kv: int, mask: torch.Tensor,
               d_v: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the attention kernels read: q with its heads contiguous, the cache rows contiguous
    (asserted; f16 unless d_v, the V head size, is given), the mask contiguous; and the output
    [n, n_head * d_v] to write."""
    n, n_head, d_k = q.shape
    if q.stride(2) != 1 or q.stride(1) != d_k:
        q = q.contiguous()
    assert k.is_contiguous() and v.is_contiguous() and (d_v is not None or k.dtype == v.dtype == torch.float16)
    d_v = v.shape[1] // n_head_kv if d_v is None else d_v
    return q, mask.contiguous(), torch.empty(n, n_head * d_v, dtype=torch.float32)


def attn_kv(lib: KernelLib, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, types: tuple[int, int], n_kv: int,
            n_head_kv: int, d_v: int, mask: torch.Tensor, scale: float,
            visible: tuple[torch.Tensor, torch.Tensor] | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """q: [n, n_head, d_k] float32 (heads contiguous) over a stream of a cache of any
    c_kv_types: k [n_cells, n_head_kv * d_k values], v likewise, in their storage (float16, or
    uint8 blocks: row bytes), `types` their GGML types, d_v the V head size; mask [n, n_kv]
    float32 -> [n, n_head * d_v].  The C attention over the visible cells (visible_cells(mask),
    computed here unless given); a block-typed cache has each visible cell's rows widened to
    f32 (kernels/c/attn.c attn_group_blocks).  sinks [n_head] (gpt-oss): each head's sink logit
    in its softmax's sum (ggml_soft_max_add_sinks)."""
    q, mask, out = _attn_args(q, k, v, n_head_kv, mask, d_v)
    n, n_head, d_k = q.shape
    ptr, cells = visible_cells(mask) if visible is None else visible
    sk = None if sinks is None else sinks.to(torch.float32).contiguous()  # [n_head]
    rc = lib.fn.lp_attn_kv_sinks(q.data_ptr(), n, q.stride(0), n_head, n_head_kv, d_k, d_v, types[0], k.data_ptr(),
                                 types[1], v.data_ptr(), n_kv, mask.data_ptr(), ptr.data_ptr(), cells.data_ptr(), scale,
                                 out.data_ptr(), None if sk is None else sk.data_ptr())
    if rc == -2:
        raise ValueError(f"lp_attn_kv: cache types {types} with heads of {d_k} / {d_v} are not read by the kernels")
    if rc != 0:
        raise MemoryError(f"lp_attn_kv: no scratch memory for {n} rows")
    return out


def kv_quantize(lib: KernelLib, x: torch.Tensor, qtype: int) -> torch.Tensor:
    """Rows x [n_rows, n] float32 as a KV cache of GGML type qtype stores them (ggml's
    quantize_row_*_ref bytes; kernels/c/kv_quant.c): uint8 [n_rows, row bytes]."""
    import gguf

    x = x.float().contiguous()
    bs, ts = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
    out = torch.empty(x.shape[0], x.shape[1] // bs * ts, dtype=torch.uint8)
    lib.fn.lp_kv_quantize(qtype, x.data_ptr(), x.shape[0], x.shape[1], out.data_ptr())
    return out


def attn_f16(lib: KernelLib, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_kv: int, n_head_kv: int,
             mask: torch.Tensor, scale: float, visible: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """q: [n, n_head, d_k] float32 (heads contiguous); k: [n_cells, n_head_kv * d_k], v:
    [n_cells, n_head_kv * d_v] float16 (a stream of the cache); mask [n, n_kv] float32 ->
    [n, n_head * d_v].  the C attention over the visible cells (visible_cells(mask),
    computed here unless given): attn_kv over an f16 cache."""
    assert k.dtype == v.dtype == torch.float16
    f16 = C_KV_TYPES["f16"]
    return attn_kv(lib, q, k, v, (f16, f16), n_kv, n_head_kv, v.shape[1] // n_head_kv, mask, scale, visible)


def attn_tiles_f16(lib: KernelLib, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_kv: int, n_head_kv: int,
                   mask: torch.Tensor, scale: float) -> torch.Tensor | None:
    """attn_f16's attention for many rows (a prompt's ubatch): the C kernel's tiles of 16 query
    vectors (kernels/c/attn_tiles.c), each K and V row widened once for all of them.  q: [n,
    n_head, d_k] float32; k, v: [n_cells, n_head_kv * d] float16 (one stream); mask [n, n_kv]
    -> [n, n_head * d_v]; None when d_k or d_v is not a multiple of 4 (take another path)."""
    q, mask, out = _attn_args(q, k, v, n_head_kv, mask)
    n, n_head, d_k = q.shape
    d_v = v.shape[1] // n_head_kv
    rc = lib.fn.lp_attn_tiles_f16(q.data_ptr(), n, q.stride(0), n_head, n_head_kv, d_k, d_v, k.data_ptr(), v.data_ptr(),
                                  n_kv, mask.data_ptr(), scale, out.data_ptr(), out.stride(0))
    if rc == -2:
        return None
    if rc != 0:
        raise MemoryError(f"lp_attn_tiles_f16: no scratch memory for {n} rows")
    return out


def argmax(x: torch.Tensor) -> int:
    """The index of the first largest value of x [n] (llama.cpp's greedy pick: a NaN never
    wins): lp_argmax for a contiguous float32 row on the CPU, torch.argmax otherwise (and for a
    row with nothing above -inf)."""
    lib = row_lib(x) if x.dim() == 1 and x.is_contiguous() else None
    if lib is not None:
        i = lib.fn.lp_argmax(x.data_ptr(), x.shape[0])
        if i >= 0:
            return int(i)
    return int(torch.argmax(x).item())


TOPK_MAX = 4096  # lp_topk's insertion sort of the kept ones is k^2: beyond this, torch.topk


def topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(ids int64 [k], logits float32 [k]) of the k largest of x [n], largest first (ties: the
    earlier index first), from lp_topk; None where it does not apply (not a contiguous float32
    row on the CPU, k outside 1..min(n, TOPK_MAX), no kernels): use torch.topk."""
    if x.dim() != 1 or not x.is_contiguous() or not 1 <= k <= min(x.shape[0], TOPK_MAX):
        return None
    lib = row_lib(x)
    if lib is None:
        return None
    ids, vals = torch.empty(k, dtype=torch.int64), torch.empty(k, dtype=torch.float32)
    lib.fn.lp_topk(x.data_ptr(), x.shape[0], k, ids.data_ptr(), vals.data_ptr())
    return ids, vals
