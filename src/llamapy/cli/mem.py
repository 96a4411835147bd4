"""`llamapy mem`: every buffer a context would allocate, predicted from the GGUF header alone
(or from hyperparameters typed on the command line), printed the way llama.cpp prints them,
with the arithmetic spelled out.  `--fit` tabulates the largest -c that fits a budget."""
from __future__ import annotations

import argparse
import json
import logging
from dataclasses import asdict, replace

from ..memory.cache_ram import CacheRamBudgetError, CacheRamEstimate, cache_ram_estimate, fit_cache_ram
from ..memory.estimate import MiB, MemoryEstimate, ModelInfo, estimate_memory, model_info
from ..memory.fit import MemoryBudgetError, breakdown, default_budget, fit_ctx, largest_fitting_ctx
from ..memory.kv_types import KVType
from ..model.hparams import HParams
from ..params import ContextParams
from .args import pipe_params
from .flags import add_context, add_model

KiB = 1024
FIT_TYPES = ("f16", "q8_0", "q4_0")


def add_parser(sub) -> None:
    p = sub.add_parser("mem", help="predict weights, KV cache, compute and output memory without loading the model")
    add_model(p)
    add_context(p)
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.add_argument("--fit", action="store_true", help="print the largest -c that fits for each -np, -ub and KV type")
    p.add_argument("--n-outputs", type=int, default=None, help="logits rows to reserve (default: -np, one per sequence)")
    p.add_argument("-cram", "--cache-ram", type=int, default=None, metavar="N",
                   help="count serve's host-memory prompt cache of up to N MiB (-1: no limit, bounded by -c's tokens; "
                        "default: not counted, serve's default is 8192)")
    g = p.add_argument_group("hyperparameters without a model file (any of them skips -m)")
    g.add_argument("--n-layer", type=int, default=None)
    g.add_argument("--n-embd", type=int, default=None)
    g.add_argument("--n-head", type=int, default=None)
    g.add_argument("--n-head-kv", type=int, default=None, help="default: --n-head (no GQA)")
    g.add_argument("--n-embd-head", type=int, default=None, help="default: n_embd / n_head")
    g.add_argument("--n-ctx-train", type=int, default=131072)
    g.add_argument("--n-vocab", type=int, default=0, help="for the logits terms (0: unknown)")
    g.add_argument("--n-ff", type=int, default=0, help="for the FFN terms (0: unknown)")
    p.set_defaults(fn=cmd_mem)


def hparams_from_args(a: argparse.Namespace) -> HParams:
    """HParams for a dense llama-shaped model from --n-layer/--n-embd/--n-head/--n-head-kv."""
    missing = [f"--{n.replace('_', '-')}" for n in ("n_layer", "n_embd", "n_head") if getattr(a, n) is None]
    if missing:
        raise ValueError(f"without a model file, give {', '.join(missing)} (and --n-head-kv for GQA)")
    n_head_kv = a.n_head_kv or a.n_head
    if a.n_head % n_head_kv:
        raise ValueError(f"--n-head ({a.n_head}) must be a multiple of --n-head-kv ({n_head_kv})")
    d = a.n_embd_head or a.n_embd // a.n_head
    return HParams(arch="llama", n_ctx_train=a.n_ctx_train, n_embd=a.n_embd, n_layer=a.n_layer, n_ff=a.n_ff,
                   n_head=a.n_head, n_head_kv=n_head_kv, n_embd_head_k=d, n_embd_head_v=d, n_vocab=a.n_vocab,
                   f_norm_rms_eps=1e-5, rope_freq_base=10000.0, rope_freq_base_swa=10000.0, rope_freq_scale=1.0, n_rot=d)


def _params(a: argparse.Namespace, **over) -> ContextParams:
    p = ContextParams(n_ctx=a.ctx_size, n_batch=a.batch_size, n_ubatch=a.ubatch_size, n_seq_max=a.parallel,
                      type_k=a.cache_type_k, type_v=a.cache_type_v, flash_attn=a.flash_attn,
                      kv_unified=a.kv_unified, swa_full=a.swa_full, device=a.device, offload_kqv=not a.no_kv_offload)
    return replace(p, **over)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _estimate(info: ModelInfo, p: ContextParams, a: argparse.Namespace) -> tuple[MemoryEstimate, list[str], str | None]:
    """The estimate plus the clamp/fit messages that resolve_cparams and fit_ctx logged, and a
    budget verdict (None when no budget was asked about)."""
    col = _Collect()
    root = logging.getLogger("llamapy")
    level = root.level
    root.setLevel(min(level or logging.WARNING, logging.WARNING))  # a quieter caller must not hide clamps
    root.addHandler(col)
    verdict = None
    try:
        budget = int(a.mem_budget * MiB) if a.mem_budget else None
        if p.n_ctx == 0 and (budget is not None or info.weights):
            fit = fit_ctx(info, p, default_budget(p.device) if budget is None else budget, a.n_outputs)
            p = replace(p, n_ctx=fit.n_ctx)
        est = estimate_memory(info, p, a.n_outputs)
        if budget is not None and p.n_ctx > 0:
            fit_ctx(info, p, budget, a.n_outputs)
            verdict = f"fits the memory budget of {budget / MiB:.2f} MiB"
            if a.cache_ram:  # serve's prompt cache in host memory, beside the context
                c = cache_ram_estimate(est, a.cache_ram)
                fit_cache_ram(c, est.total, budget, True, True)
                verdict += f" with the prompt cache's {c.bound / MiB:.2f} MiB (--cache-ram {a.cache_ram})"
    except MemoryBudgetError as e:
        if p.n_ctx == 0:
            raise
        est, verdict = estimate_memory(info, p, a.n_outputs), f"does NOT fit: {e}"
    except CacheRamBudgetError as e:
        verdict = f"the context fits, the prompt cache does NOT: {e}"
    finally:
        root.removeHandler(col)
        root.setLevel(level)
    return est, col.lines, verdict


def explain(e: MemoryEstimate, clamps: list[str], a: argparse.Namespace) -> list[str]:
    hp, c = e.hparams, e.cparams
    tk, tv = KVType(c.type_k), KVType(c.type_v)
    wk, wv = hp.n_embd_k_gqa(), hp.n_embd_v_gqa()
    bk, bv = tk.row_bytes(wk), tv.row_bytes(wv)
    out = [
        f"model: {hp.arch}, {hp.n_layer} layers, n_embd {hp.n_embd}, n_head {hp.n_head}, n_head_kv {hp.n_head_kv}, "
        f"head dim {hp.n_embd_head_k}, n_ctx_train {hp.n_ctx_train}",
        f"GQA ratio: n_head / n_head_kv = {hp.n_head} / {hp.n_head_kv} = {hp.n_head / hp.n_head_kv:g}: "
        f"n_embd_k_gqa = {hp.n_head_kv} x {hp.n_embd_head_k} = {wk}, n_embd_v_gqa = {wv}",
        f"per token, per layer: K {wk} x {c.type_k} = {bk} bytes + V {wv} x {c.type_v} = {bv} bytes = {bk + bv} bytes ({(bk + bv) / KiB:g} KiB)",
    ]
    for ch in e.caches:
        label = f"{ch.name} cache, " if ch.name else ""
        out.append(f"per token, {label}{len(ch.layers)} layers: {ch.bytes_per_token / KiB:g} KiB x {ch.cells * ch.n_stream} cells = {ch.bytes / MiB:.2f} MiB")
    streams = f"{c.n_stream} stream{'s' if c.n_stream > 1 else ''} of {c.n_ctx // c.n_stream} cells"
    per_slot = (f"each of the {c.n_seq_max} sequences gets {c.n_ctx_seq} tokens (-c {c.n_ctx} / -np {c.n_seq_max}; --kv-unified shares all {c.n_ctx})"
                if c.n_stream > 1 else f"one stream shared by {c.n_seq_max} sequence(s): up to {c.n_ctx_seq} tokens each, {c.n_ctx} in total")
    out += [f"context: n_ctx = {c.n_ctx} ({streams}); {per_slot}",
            f"batch: n_batch = {c.n_batch}, n_ubatch = {c.n_ubatch}, flash_attn = {c.flash_attn}"]
    out += [f"clamp: {m}" for m in clamps] or ["clamps: none applied"]
    return out


def render(e: MemoryEstimate, clamps: list[str], verdict: str | None, a: argparse.Namespace) -> str:
    lines = explain(e, clamps, a) + [""]
    for ch in e.caches:
        if ch.name:
            lines.append(f"llama_kv_cache_iswa: creating {ch.name:>7} KV cache, size = {ch.cells} cells")
        lines.append(f"llama_kv_cache: {ch.log_line()}")
    lines.append(f"llama_context:        CPU  output buffer size = {e.output / MiB:8.2f} MiB ({e.n_outputs} x n_vocab {e.hparams.n_vocab} x f32)")
    lines.append(f"sched_reserve:        CPU compute buffer size = {e.compute / MiB:8.2f} MiB (ubatch of {min(e.cparams.n_ctx, e.cparams.n_ubatch)} tokens against {max(ch.cells for ch in e.caches)} cells)")
    by_phase = e.compute_by_phase()
    for t in e.compute_terms:
        during = f"  (during {t.call})" if t.call else ""
        lines.append(f"    {t.phase:<10} {t.name:<24} {str(list(t.shape)):<18} {t.bytes / MiB:9.2f} MiB{during}")
    lines.append("    peak = persistent + largest phase (a phase's terms in order; a call's only while it runs): "
                 + ", ".join(f"{k} {v / MiB:.2f} MiB" for k, v in by_phase.items()))
    if e.weights or e.weights_file:
        lines.append(f"load_tensors:          CPU model buffer size = {e.weights / MiB:10.2f} MiB (file: {e.weights_file / MiB:.2f} MiB)")
    if e.process is not None:
        lines.append(f"llama_model_loader:    {e.process.line()}")
    ram = _cache_ram(e, a)
    lines.append(f"{ram.line()}" if ram is not None else
                 "prompt cache (serve --cache-ram, host memory): not counted; serve holds up to 8192 MiB by default (mem --cache-ram N counts it)")
    lines.append(f"total: {breakdown(e)}" + (f"; with the prompt cache up to {(e.total + ram.bound) / MiB:.2f} MiB" if ram and ram.bound else ""))
    if verdict:
        lines.append(verdict)
    return "\n".join(lines)


def _cache_ram(e: MemoryEstimate, a: argparse.Namespace) -> CacheRamEstimate | None:
    """serve's prompt cache for mem --cache-ram N; None when not asked."""
    n = getattr(a, "cache_ram", None)
    if n is None:
        return None
    if n < -1:
        raise ValueError(f"--cache-ram ({n}) must be >= -1 (MiB; -1: no limit, 0: off)")
    return cache_ram_estimate(e, n)


def to_json(e: MemoryEstimate, clamps: list[str], verdict: str | None, a: argparse.Namespace | None = None) -> dict:
    hp = e.hparams
    ram = _cache_ram(e, a) if a is not None else None
    return {
        "buffers": e.as_dict(),
        "total": e.total,
        "weights_file": e.weights_file,
        "process": None if e.process is None else {**asdict(e.process), "total": e.process.total},
        "caches": [{"name": ch.name, "n_layer": len(ch.layers), "cells": ch.cells, "n_stream": ch.n_stream,
                    "type_k": ch.type_k, "type_v": ch.type_v, "k_bytes": ch.k_bytes, "v_bytes": ch.v_bytes,
                    "bytes_per_token": ch.bytes_per_token} for ch in e.caches],
        "compute_terms": [{"name": t.name, "phase": t.phase, "shape": list(t.shape), "bytes": t.bytes} for t in e.compute_terms],
        "n_outputs": e.n_outputs,
        "cparams": asdict(e.cparams),
        "hparams": {k: getattr(hp, k) for k in ("arch", "n_ctx_train", "n_embd", "n_layer", "n_head", "n_head_kv", "n_embd_head_k", "n_vocab", "n_swa")},
        "gqa_ratio": hp.n_head / hp.n_head_kv,
        "clamps": clamps,
        "budget": verdict,
        "prompt_cache": None if ram is None else {"cache_ram_mib": ram.mib, "bytes_per_token": ram.bytes_per_token, "bound": ram.bound},
    }


def fit_table(info: ModelInfo, a: argparse.Namespace) -> tuple[int, list[dict]]:
    budget = int(a.mem_budget * MiB) if a.mem_budget else default_budget(a.device)
    rows = []
    types = list(dict.fromkeys((*FIT_TYPES, a.cache_type_k)))
    for np_ in sorted({1, 4, a.parallel}):
        for ub in sorted({512, a.ubatch_size}):
            for t in types:
                p = _params(a, n_seq_max=np_, n_ubatch=ub, type_k=t, type_v=t)
                n = largest_fitting_ctx(info, p, budget, n_outputs=a.n_outputs)
                rows.append({"np": np_, "ub": ub, "type": t, "max_ctx": n, "per_seq": n if p.kv_unified else n // np_})
    return budget, rows


def cmd_mem(a: argparse.Namespace) -> int:
    file_less = any(getattr(a, n) is not None for n in ("n_layer", "n_embd", "n_head", "n_head_kv"))
    info = ModelInfo(hparams_from_args(a), 0, 0) if file_less else model_info(a.model)
    if a.fit:
        budget, rows = fit_table(info, a)
        if a.json:
            print(json.dumps({"budget": budget, "rows": rows}, indent=1))
            return 0
        print(f"largest -c that fits {budget / MiB:.2f} MiB (n_ctx_train {info.hparams.n_ctx_train}; 0: nothing fits)")
        print(f"{'-np':>4} {'-ub':>6} {'KV type':>8} {'-c':>9} {'per seq':>9}")
        for r in rows:
            print(f"{r['np']:>4} {r['ub']:>6} {r['type']:>8} {r['max_ctx']:>9} {r['per_seq']:>9}")
        return 0
    e, clamps, verdict = _estimate(info, _params(a), a)
    if a.pp > 1:
        return _mem_stages(a, e)
    print(json.dumps(to_json(e, clamps, verdict, a), indent=1) if a.json else render(e, clamps, verdict, a))
    return 0


def _mem_stages(a: argparse.Namespace, whole: MemoryEstimate) -> int:
    """mem --pp N: each stage's weights, KV, compute and activations in flight."""
    from ..pipeline import plan_stages
    from ..pipeline.estimate import estimate_stages

    if any(getattr(a, n) is not None for n in ("n_layer", "n_embd", "n_head", "n_head_kv")):
        raise ValueError("mem --pp reads the tensors each stage holds: give -m, not hyperparameters")
    pipe = pipe_params(a)
    _, stages = plan_stages(a.model, pipe)
    ests = estimate_stages(a.model, _params(a), stages, a.n_outputs, whole.cparams.n_ctx)
    if a.json:
        print(json.dumps([{"stage": s.index, "layers": [s.stage.il0, s.stage.il1], "total": s.total,
                           "activations": s.activations, **s.est.as_dict()} for s in ests], indent=1))
        return 0
    c = whole.cparams
    print(f"pipeline of {len(ests)} stages (--pp {a.pp}"
          + (f", --tensor-split {a.tensor_split}" if a.tensor_split else "") + f"), n_ctx {c.n_ctx}, n_ubatch {c.n_ubatch}:")
    for s in ests:
        print(s.line())
    print(f"largest stage: {max(s.total for s in ests) / MiB:.2f} MiB; one process: {whole.total / MiB:.2f} MiB")
    return 0
