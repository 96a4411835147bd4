"""Memory arithmetic: every buffer a Context will allocate, from HParams and resolved CParams
alone (no tensor data is read).  The seed's formula is the core:

    kv_bytes = n_ctx * sum over layers of (row_bytes(n_embd_k_gqa) + row_bytes(n_embd_v_gqa))

with the two cases it does not cover: quantized K/V rows (KVType.row_bytes, the same code the
cache allocates with) and sliding-window models, whose SWA layers get a second, smaller cache
(llama_kv_cache_iswa, see swa_cells()).  The compute term models OUR forward pass
(model/archs/llama.py), phase by phase; estimate_memory() is the public entry point."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..cparams import CParams, pad, resolve_cparams
from ..model.hparams import HParams
from ..params import ContextParams
from .host import coarse_many_bf16_expected, kernels_expected, torch_threads
from .kv_types import KVType
from .moe_terms import ffn_width, moe_ffn_terms
from .op_terms import ComputeTerm, attn_tiles_ws_bytes, flash_tile_bytes, matmul_terms
from .process import ProcessEstimate, layers_dense, process_estimate, resident_weight_bytes as _resident_bytes

MiB = 1024 * 1024
SWA_PAD = 256  # llama_kv_cache_iswa: the SWA cache size is always padded to 256
F32 = 4  # activations and logits are float32
# block_matrix.py's and qmatrix.py's thresholds are restated from kernels/types.py (tests hold them equal)
from ..kernels.types import (DENSE_ROWS, FAST_ROWS, QMATRIX_DENSE_ROWS,  # noqa: E402,F401
                             attn_kv_scratch_bytes, c_kv_types, lanes_slice_rows, tile_attention)


def swa_cells(n_ctx_stream: int, n_swa: int, n_seq_max: int, kv_unified: bool, n_ubatch: int, swa_full: bool = False) -> int:
    """Cells per stream of the SWA cache (llama_kv_cache_iswa's size_swa).

    A stream must hold the window of every sequence it serves (n_swa each; a unified stream
    serves all n_seq_max) plus one ubatch being written, padded to 256 and never more than
    the full cache: pad256(min(n_ctx_stream, n_swa * (n_seq_max if unified else 1) + n_ubatch)).
    --swa-full gives the SWA layers the full n_ctx_stream cells."""
    if swa_full:
        return n_ctx_stream
    return pad(min(n_ctx_stream, n_swa * (n_seq_max if kv_unified else 1) + n_ubatch), SWA_PAD)


@dataclass(frozen=True, slots=True)
class CacheEstimate:
    """One llama_kv_cache: its layers, cells per stream, streams, and K/V bytes."""

    name: str  # "" for a plain cache, "non-SWA" / "SWA" for the two halves of an iSWA cache
    layers: tuple[int, ...]
    cells: int  # per stream, as llama.cpp prints them
    n_stream: int
    n_seq_max: int
    type_k: str
    type_v: str
    k_bytes: int
    v_bytes: int

    @property
    def bytes(self) -> int:
        return self.k_bytes + self.v_bytes

    @property
    def bytes_per_token(self) -> int:
        """K + V bytes one cell costs across this cache's layers."""
        return self.bytes // (self.cells * self.n_stream)

    def log_line(self) -> str:
        """llama.cpp's `llama_kv_cache: size = ...` line for this cache."""
        return (
            f"size = {self.bytes / MiB:7.2f} MiB ({self.cells:6d} cells, {len(self.layers):3d} layers, "
            f"{self.n_seq_max:2d}/{self.n_seq_max} seqs), K ({self.type_k}): {self.k_bytes / MiB:7.2f} MiB, "
            f"V ({self.type_v}): {self.v_bytes / MiB:7.2f} MiB"
        )


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Every buffer of a Context, in bytes; `caches` and `compute_terms` itemise KV and compute."""

    hparams: HParams
    cparams: CParams
    weights: int  # resident bytes as the loader keeps them
    weights_file: int  # bytes of the tensors in the GGUF file (llama.cpp's model buffer)
    caches: tuple[CacheEstimate, ...]
    compute_terms: tuple[ComputeTerm, ...]
    n_outputs: int  # logits rows reserved (output buffer and the logits term of compute)
    output: int
    process: ProcessEstimate | None = None  # the loaded model in the process (weights, vocabulary, metadata)

    @property
    def kv_k(self) -> int:
        return sum(c.k_bytes for c in self.caches)

    @property
    def kv_v(self) -> int:
        return sum(c.v_bytes for c in self.caches)

    @property
    def kv(self) -> int:
        return self.kv_k + self.kv_v

    @property
    def compute(self) -> int:
        """Peak of the forward pass: persistent terms + the largest phase."""
        phases = self.compute_by_phase()
        persistent = phases.pop("persistent", 0)
        return persistent + max(phases.values(), default=0)

    def compute_by_phase(self) -> dict[str, int]:
        """Peak bytes of each phase, walking its terms in forward order: lasting terms
        accumulate as they are created; a call adds its terms only while it runs."""
        lasting: dict[str, int] = {}
        peak: dict[str, int] = {}
        calls: dict[tuple[str, str], int] = {}
        for t in self.compute_terms:
            if t.call:
                calls[(t.phase, t.call)] = calls.get((t.phase, t.call), 0) + t.bytes
        seen: set[tuple[str, str]] = set()
        for t in self.compute_terms:
            now = lasting.get(t.phase, 0)
            if t.call:
                if (t.phase, t.call) not in seen:
                    seen.add((t.phase, t.call))
                    peak[t.phase] = max(peak.get(t.phase, 0), now + calls[(t.phase, t.call)])
                continue
            lasting[t.phase] = now + t.bytes
            peak[t.phase] = max(peak.get(t.phase, 0), lasting[t.phase])
        return peak

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.output

    @property
    def device_total(self) -> int:
        """What the model's device must hold: the total, less the KV cache when -nkvo keeps it
        in host memory (what the fitter checks against the device's budget)."""
        return self.total - (0 if self.cparams.offload_kqv else self.kv)

    def as_dict(self) -> dict[str, int]:
        """Bytes by buffer, with the keys of Context.memory_report()."""
        return {"model": self.weights, "kv_k": self.kv_k, "kv_v": self.kv_v, "compute": self.compute, "output": self.output}


def kv_caches(hp: HParams, c: CParams, layers: range | None = None) -> tuple[CacheEstimate, ...]:
    """The KV caches a context with resolved params `c` allocates: one for a dense model, the
    non-SWA + SWA pair for a sliding-window model (llama_kv_cache_iswa).  layers: only these
    layers' tensors (a pipeline stage's)."""
    n_stream = c.n_stream
    cells = c.n_ctx // n_stream  # == c.n_ctx_seq
    held = range(hp.n_layer) if layers is None else layers
    if not any(hp.is_swa(il) for il in range(hp.n_layer)):
        return (_cache("", tuple(held), cells, hp, c),)
    dense = tuple(il for il in held if not hp.is_swa(il))
    swa = tuple(il for il in held if hp.is_swa(il))
    n_swa_cells = swa_cells(cells, hp.n_swa, c.n_seq_max, c.kv_unified, c.n_ubatch, c.swa_full)
    return (_cache("non-SWA", dense, cells, hp, c), _cache("SWA", swa, n_swa_cells, hp, c))


def _cache(name: str, layers: tuple[int, ...], cells: int, hp: HParams, c: CParams) -> CacheEstimate:
    tk, tv = KVType(c.type_k), KVType(c.type_v)
    rows = c.n_stream * cells
    k = sum(rows * tk.row_bytes(hp.n_embd_k_gqa(il)) for il in layers)
    v = sum(rows * tv.row_bytes(hp.n_embd_v_gqa(il)) for il in layers)
    return CacheEstimate(name, layers, cells, c.n_stream, c.n_seq_max, c.type_k, c.type_v, k, v)


def flash_attn_enabled(c: CParams) -> bool:
    """-fa auto resolves to on (llama.cpp enables it where supported, and requires it for a
    quantized V cache)."""
    return c.flash_attn != "off"


def compute_terms(hp: HParams, c: CParams, caches: tuple[CacheEstimate, ...], n_outputs: int,
                  dense: str | None = None) -> tuple[ComputeTerm, ...]:
    """Worst-case intermediates of one ubatch through model/archs/llama.py: n_tokens =
    min(n_ctx, n_ubatch) rows against a full stream (n_kv = the largest cache's cells).
    Flash attention off materializes KQ [n_head, n_tokens, n_kv]; the logits are reserved
    for n_outputs rows only, not for every row of the ubatch.  The residual adds are in place
    (BlockMatrix.add_into / QMatrix.add_into)."""
    blocks = kernels_expected()  # the loader's BlockMatrix kernels (model/block_matrix.py)
    if dense is None:  # no file to read the types from: the GEMMs, as the CPU decides
        from ..kernels.build import bf16_expected

        dense = "bf16" if bf16_expected() and coarse_many_bf16_expected() else "fp32"

    n_t = min(c.n_ctx, c.n_ubatch)
    n_kv = max(ch.cells for ch in caches)
    dk, dv = hp.n_embd_head_k, hp.n_embd_head_v
    wk, wv = hp.n_embd_k_gqa(), hp.n_embd_v_gqa()
    n_qkv = hp.n_head * dk + wk + wv
    n_out, flash = min(n_t, n_outputs), flash_attn_enabled(c) and not hp.attn_soft_cap  # Gemma 2: KQ materialized
    terms = [ComputeTerm("inp_embd (residual x)", (n_t, hp.n_embd), "persistent")]
    for ch in caches:  # one mask per cache, built once per ubatch (kept for every layer)
        terms.append(ComputeTerm(f"kq_mask{' (' + ch.name + ')' if ch.name else ''}", (n_t, ch.cells), "persistent"))
    few_rows_kernel = (blocks and n_t < FAST_ROWS and flash  # gpt-oss's sinks too (not soft-capping)
                       and c_kv_types(c.type_k, c.type_v, hp.n_embd_head_k, hp.n_embd_head_v) is not None)
    if few_rows_kernel:
        for ch in caches:  # the CPU kernel's attention: each row's visible cells, int64 (kernels/ops.py)
            terms.append(ComputeTerm(f"kq visible cells{' (' + ch.name + ')' if ch.name else ''}", (n_t, ch.cells),
                                     "persistent", 8))
    terms += [*matmul_terms("wqkv", n_t, hp.n_embd, n_qkv, "attention", "attn_norm", blocks, dense),
              ComputeTerm("Qcur|Kcur (rope)", (n_t, hp.n_head * dk + wk), "attention"),
              ComputeTerm("Kcur (contiguous)", (n_t, wk), "attention")]
    # the attention call: many rows over an f16 cache with the kernels, their tiles read the
    # cache in place (kernels/c/attn_tiles.c: a workspace per thread); otherwise KVCache.view()
    # decodes the first n_kv cells to f32 (an f32 cache is read in place), then the fused
    # kernel's score tiles, or (-fa off) the K/V heads repeated to n_head and the whole KQ with
    # its softmax (few rows count the same, an upper bound of the few-row kernel's scratch)
    att = []
    if blocks and hp.attn_plain and tile_attention(n_t, flash, c.type_k, c.type_v, dk, dv, hp.n_head, hp.n_head_kv):
        att.append(ComputeTerm("flash attn tiles (kernel workspaces)", (torch_threads() * attn_tiles_ws_bytes(dk, dv),),
                               "attention", 1, "attention"))
    else:
        if c.type_k != "f32":
            att.append(ComputeTerm("k cache view (f32)", (n_kv, wk), "attention", F32, "attention"))
        if c.type_v != "f32":
            att.append(ComputeTerm("v cache view (f32)", (n_kv, wv), "attention", F32, "attention"))
        if not flash:
            if hp.n_head_kv != hp.n_head:
                att += [ComputeTerm("k (gqa repeat)", (hp.n_head, n_kv, dk), "attention", F32, "attention"),
                        ComputeTerm("v (gqa repeat)", (hp.n_head, n_kv, dv), "attention", F32, "attention")]
            att += [ComputeTerm("kq (no flash attn)", (hp.n_head, n_t, n_kv), "attention", F32, "attention"),
                    ComputeTerm("kq softmax", (hp.n_head, n_t, n_kv), "attention", F32, "attention"),
                    ComputeTerm("kqv (heads first)", (hp.n_head, n_t, dv), "attention", F32, "attention")]
        else:
            n_threads = torch_threads()  # the Context sets -t before it estimates
            att.append(ComputeTerm("flash attn tiles", (flash_tile_bytes(n_t, n_kv, n_threads),), "attention", 1,
                                   "attention"))
    if few_rows_kernel and not c.type_k == c.type_v == "f16":  # its cells widened, KV_WIDEN at a time a thread
        att.append(ComputeTerm("kv cells widened (kernel scratch)",
                               (torch_threads() * attn_kv_scratch_bytes(hp.n_embd_head_k, hp.n_embd_head_v),),
                               "attention", 1, "attention"))
    terms += att
    terms += [ComputeTerm("kqv_out", (n_t, hp.n_head * dv), "attention", F32, "attention"),
              *matmul_terms("wo", n_t, hp.n_head * dv, hp.n_embd, "attention", "kqv_out (heads merged)", blocks, dense),
              *matmul_terms("ffn_gate|up", n_t, hp.n_embd, 2 * ffn_width(hp), "ffn", "ffn_norm", blocks, dense, kept=True),
              ComputeTerm("ffn_gate (act)", (n_t, ffn_width(hp)), "ffn"),
              # PyTorch's GLU makes a second tensor; the kernels' one pass does not, but the term
              # stays as room: on a GEMM path for the library's packing buffers (without it a
              # 512-row ubatch on the bf16 GEMM measured 0.3 MiB over: tests/test_workspace_peak.py),
              # in the lanes where a product runs in several slices (a 512-row ubatch in slices of
              # 256 measured up to 24 KiB over, its peak moving by 100 KiB from run to run; in
              # one slice the reservation is 1.4x the peak without it)
              *([] if blocks and dense == "lanes" and n_t <= lanes_slice_rows(ffn_width(hp))
                else [ComputeTerm("ffn_gate_par", (n_t, ffn_width(hp)), "ffn")]),
              *matmul_terms("ffn_down", n_t, ffn_width(hp), hp.n_embd, "ffn", "", blocks, dense),
              *(ComputeTerm(*t) for t in moe_ffn_terms(hp, n_t, blocks, torch_threads())),  # experts, MoeWork
              ComputeTerm("result_norm", (n_out, hp.n_embd), "output"),
              ComputeTerm("result_output (logits)", (n_out, hp.n_vocab), "output")]
    return tuple(terms)


def estimate_from(hp: HParams, c: CParams, weights: int = 0, weights_file: int = 0, n_outputs: int | None = None,
                  process: ProcessEstimate | None = None, dense: str | None = None,
                  layers: range | list[int] | None = None) -> MemoryEstimate:
    """MemoryEstimate for resolved params.  n_outputs: logits rows to reserve (default
    n_seq_max, one per sequence as in generation; a perplexity run needs n_ubatch).
    dense: how the layers' many-row products run, "bf16", "fp32" or "lanes" (memory/process.py
    layers_dense; None: the GEMMs, as the CPU decides).  layers: the KV of only these layers (a
    pipeline stage's; None: all)."""
    n_out = c.n_seq_max if n_outputs is None else n_outputs
    if n_out < 1:
        raise ValueError(f"n_outputs must be >= 1, got {n_out}")
    caches = kv_caches(hp, c, layers)
    return MemoryEstimate(
        hparams=hp,
        cparams=c,
        weights=weights,
        weights_file=weights_file,
        caches=caches,
        compute_terms=compute_terms(hp, c, caches, n_out, dense),
        n_outputs=n_out,
        output=n_out * hp.n_vocab * F32,
        process=process,
    )


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the estimate needs from a model: hyperparameters and weight bytes."""

    hparams: HParams
    weights: int  # resident
    weights_file: int
    process: ProcessEstimate | None = None  # None: typed-in hyperparameters, no file
    dense: str | None = None  # how the layers' many-row products run (None: no file)


def dense_for(tensors) -> str:
    """How this file's layers' many-row products run on this CPU (memory/process.py layers_dense)."""
    from ..kernels.build import bf16_expected, expected_level

    kernels = kernels_expected()
    return layers_dense(tensors, expected_level() if kernels else None, kernels and bf16_expected(), coarse_many_bf16_expected())


def model_info(model_or_path) -> ModelInfo:
    """From a loaded Model (its real byte counts) or a GGUF path / registered name / None for
    the default model (header only, no torch: each tensor as the loader keeps it)."""
    if hasattr(model_or_path, "hparams"):
        m = model_or_path
        return ModelInfo(m.hparams, m.n_bytes_resident, sum(t.n_bytes for t in m.gguf.tensors.values()),
                         process_estimate(m.gguf, m.n_bytes_resident), dense_for(m.gguf.tensors))
    from ..gguf.header import GGUFHeader
    from ..model.hparams import hparams_from_gguf

    path = None if model_or_path is None else Path(model_or_path)
    if path is None or not path.is_file():
        from ..registry import resolve_model

        path = resolve_model(None if model_or_path is None else str(model_or_path))
    h = GGUFHeader(path)
    weights = resident_weight_bytes(h.tensors)
    return ModelInfo(hparams_from_gguf(h), weights, sum(t.n_bytes for t in h.tensors.values()), process_estimate(h, weights),
                     dense_for(h.tensors))


def resident_weight_bytes(tensors) -> int:
    """Bytes of the weights once loaded (memory/process.py): matrices in the file's blocks
    where llamapy's CPU kernels are available and read the type, else as model/qmatrix.py
    converts them; other tensors as float32."""
    return _resident_bytes(tensors, blocks=kernels_expected())


def estimate_memory(model_or_path, params: ContextParams | None = None, n_outputs: int | None = None, n_ctx_fitted: int | None = None) -> MemoryEstimate:
    """Predict every buffer of Context(model, params) without reading tensor data."""
    info = model_or_path if isinstance(model_or_path, ModelInfo) else model_info(model_or_path)
    c = resolve_cparams(params or ContextParams(), info.hparams, n_ctx_fitted)
    return estimate_from(info.hparams, c, info.weights, info.weights_file, n_outputs, info.process, info.dense)
