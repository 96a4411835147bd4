"""Context (llama_context): decode() = validate -> split into ubatches -> find KV cells for all
of them -> run each through the network -> keep logits of the flagged slots."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import torch

from .batch import Batch, BatchAllocator, UBatch
from .cparams import CParams, log_cparams, resolve_cparams
from .log import logger
from .memory.estimate import MemoryEstimate, dense_for, estimate_from
from .memory.factory import Memory, bind_slot_info, create_memory
from .memory.heap import auto_tune_heap
from .memory.kv_log import buffer_name
from .model.cuda_graphs import CudaGraphs
from .model.graph import GraphCache, make_inputs
from .model.work import ComputeWork
from .model.model import Model
from .params import ContextParams

MiB = 1024 * 1024


@dataclass(slots=True)
class DecodeStats:
    """Counters that show the batch -> ubatch split at work."""

    n_decode_calls: int = 0
    n_ubatches: int = 0
    n_tokens: int = 0
    n_outputs: int = 0
    ubatches_per_decode: list[int] = field(default_factory=list)
    last_ubatch_sizes: list[int] = field(default_factory=list)  # tokens of each ubatch of the last decode (-b / -ub)

    def reset(self) -> None:
        self.n_decode_calls = self.n_ubatches = self.n_tokens = self.n_outputs = 0
        self.ubatches_per_decode.clear()


class Context:
    def __init__(self, model: Model, params: ContextParams | None = None) -> None:
        self.model = model
        self.params = params or ContextParams()
        hp = model.hparams
        if self.params.n_threads > 0:
            torch.set_num_threads(self.params.n_threads)
        auto_tune_heap()  # each ubatch's buffers reused from the heap (memory/heap.py)
        self.params = replace(self.params, device=str(model.device))
        self.cparams: CParams = resolve_cparams(self.params, hp, self._fitted_n_ctx())
        log_cparams(self.cparams, hp)
        c = self.cparams
        self.kv_device = model.device if c.offload_kqv else torch.device("cpu")  # -nkvo: host memory
        layers = model.net.layer_ids  # all, or a pipeline stage's (pipeline/)
        self.estimate = estimate_from(hp, c, model.n_bytes_resident, model.n_bytes_file,
                                      dense=dense_for(model.gguf.tensors), layers=layers)
        _log_output_buffer(self.estimate, model.device)  # llama.cpp's order: output, KV cache, compute
        self.memory: Memory = create_memory(hp, c, self.kv_device, layers)  # KVCache, or KVCacheISWA (n_swa > 0)
        _log_compute_buffer(self.estimate, model.device)
        if model.device.type == "cpu":
            from .kernels.build import load_kernels, system_info

            logger("system_info").info(system_info(load_kernels(), torch.get_num_threads()))
        self.alloc = BatchAllocator(hp.n_vocab, c.n_batch, c.n_seq_max)
        self.stats = DecodeStats()
        self.graphs = GraphCache(model.device)  # input buffers per (n_tokens, n_kv) shape
        # the kept compute buffer: the FFN's gate|up product where glibc would map it afresh (model/work.py)
        self.work = ComputeWork() if model.device.type == "cpu" else None
        # decode replayed as CUDA graphs (None on the CPU, and under -nkvo: attention copies to the host)
        self.cuda_graphs = CudaGraphs.for_device(model.device) if c.offload_kqv and model.lora is None else None
        # LoRA (model.lora): the scales of sequences without their own (llama_set_adapters_lora's),
        # and per-sequence ones (the server's slots: requests with different adapters in one batch)
        self.lora_scales: tuple[float, ...] = model.lora.init_scales if model.lora is not None else ()
        self.seq_lora_scales: dict[int, tuple[float, ...]] = {}
        self._logits = torch.empty(0, hp.n_vocab)  # [n_outputs, n_vocab] of the last decode
        # reuse_logits: each decode step writes its logits into one buffer (grown to the most
        # outputs met), so that get_logits() is valid only until the next decode, as in
        # llama.cpp, instead of a fresh tensor per decode (a server step's 8 x 262144 floats are
        # 8 MiB of new pages every step).  Off by default; the server's scheduler turns it on.
        self.reuse_logits = False
        self._logits_buf = torch.empty(0, hp.n_vocab)
        self._output_ids: list[int] = []
        # embeddings: decode outputs t_embd rows (after the output norm), not logits (--embedding;
        # embed/ pools them per sequence).  A model without logits (bert) is always in this mode.
        self.embeddings = not getattr(model.net, "has_logits", True)

    def _fitted_n_ctx(self) -> int | None:
        """n_ctx 0: the trained context, reduced (logged) to fit the memory budget, never below
        4096; an explicit -c is checked against the budget, never changed."""
        from .memory.estimate import model_info
        from .memory.fit import default_budget, fit_ctx

        device = str(self.model.device)
        if self.params.mem_budget_mib > 0:
            budget = int(self.params.mem_budget_mib * MiB)
        else:  # the weights are loaded already: free memory no longer includes them
            budget = default_budget(device) + self.model.n_bytes_resident
        r = fit_ctx(model_info(self.model), replace(self.params, device=device), budget)
        return r.n_ctx if self.params.n_ctx == 0 else None

    # --- decode -------------------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, batch: Batch) -> None:
        """Process one batch.  Raises BatchError (bad input) or KVCacheFullError (no cells);
        in both cases the KV cache and the previous logits are unchanged.  With `embeddings`
        set, the outputs are t_embd rows [n_outputs, n_embd] (after the output norm) instead of
        logits; a non-causal model (bert) keeps no KV cache and needs the batch in one ubatch."""
        self.alloc.init(batch, self.memory.seq_pos_max, seq_pos_min=self.memory.seq_pos_min)
        if not self.cparams.causal_attn:
            return self._encode(batch)
        ubatches = self._split()
        sinfos = self.memory.prepare(ubatches)
        if self.memory.has_shift():
            self.memory.apply_shift(functools.partial(self.model.net.rotate_k, n_ctx_seq=self.cparams.n_ctx_seq))
        n_outputs = self.alloc.n_outputs
        logits = None
        out_ids = self.alloc.output_ids
        net = self.model.net
        for ub, sinfo in zip(ubatches, sinfos):
            inp, key = self._begin_ubatch(ub, sinfo, self.memory)
            if self.embeddings:  # t_embd rows, a new tensor
                out = net.hidden(inp, net.forward_layers(inp, self.memory, net.embed(inp))).to("cpu", torch.float32)
            elif self.cuda_graphs is not None:  # its output is a graph's buffer: always copied
                out = self.cuda_graphs.forward(net, inp, self.memory, key).to("cpu", copy=True)
            else:
                if self.reuse_logits and len(ubatches) == 1 and self.model.device.type == "cpu":
                    inp.logits_out = self._logits_rows(n_outputs)
                out = net.forward(inp, self.memory).to("cpu")  # [n_outputs(ub), n_vocab], a new tensor
            logits = self._place(out, ub, len(ubatches), logits, n_outputs)
        self._finish(batch, logits, n_outputs, out_ids, ubatches)

    def _encode(self, batch: Batch) -> None:
        """A non-causal (encoder) batch: every token in one ubatch, no KV cache (llama.cpp's
        encode: n_ubatch >= n_tokens), t_embd rows as the outputs."""
        n_tokens, n_ubatch = self.alloc.n_tokens, self.cparams.n_ubatch
        if n_tokens > n_ubatch:
            from .batch.validate import BatchError

            raise BatchError(f"a non-causal model attends over the whole sequence, so a batch must fit one ubatch: "
                             f"the batch has {n_tokens} tokens, n_ubatch (-ub) is {n_ubatch}; raise -ub (and -b) to "
                             f"at least {n_tokens}")
        n_outputs, out_ids = self.alloc.n_outputs, self.alloc.output_ids
        ubatches = self._split()
        net = self.model.net
        logits = None
        for ub in ubatches:
            inp = make_inputs(ub, self.model.device, self.cparams.flash_attn != "off", None, self.cparams.deterministic)
            out = net.hidden(inp, net.forward_layers(inp, None, net.embed(inp))).to("cpu", torch.float32)
            logits = self._place(out, ub, len(ubatches), logits, n_outputs)
        self._finish(batch, logits, n_outputs, out_ids, ubatches)

    def _place(self, out: torch.Tensor, ub: UBatch, n_ubatches: int, logits: torch.Tensor | None,
               n_outputs: int) -> torch.Tensor | None:
        """One ubatch's output rows [n_outputs(ub), width] into the decode's [n_outputs, width]."""
        rows = self._output_rows(ub)
        if n_ubatches == 1 and rows == list(range(n_outputs)) and out.dtype == torch.float32:
            return out  # one ubatch, outputs in order (a decode step): its rows, not a copy
        if out.shape[0]:
            if logits is None:
                logits = torch.empty(n_outputs, out.shape[1], dtype=torch.float32)
            logits[torch.tensor(rows, dtype=torch.long)] = out
        return logits

    def _finish(self, batch: Batch, logits: torch.Tensor | None, n_outputs: int, out_ids: list[int],
                ubatches: list[UBatch]) -> None:
        if logits is None:
            width = self.model.hparams.n_embd if self.embeddings else self.model.n_vocab
            logits = torch.empty(n_outputs, width, dtype=torch.float32)
        self._logits, self._output_ids = logits, out_ids
        self._count(batch, len(ubatches))
        self.stats.last_ubatch_sizes = [ub.n_tokens for ub in ubatches]

    def _logits_rows(self, n: int) -> torch.Tensor:
        """The reused logits buffer's first n rows [n, n_vocab] (grown when n is more)."""
        if self._logits_buf.shape[0] < n:
            self._logits_buf = torch.empty(n, self.model.n_vocab, dtype=torch.float32)
        return self._logits_buf[:n]

    def _count(self, batch: Batch, n_ubatches: int) -> None:
        """The stats of one decode call that went through."""
        s = self.stats
        s.n_decode_calls += 1
        s.n_ubatches += n_ubatches
        s.n_tokens += batch.n_tokens
        s.n_outputs += self.alloc.n_outputs
        s.ubatches_per_decode.append(n_ubatches)

    def _split(self) -> list[UBatch]:
        """All ubatches of the current batch: split_simple for a unified cache, split_equal
        (sequence-ordered, equal lengths) for per-sequence streams."""
        c = self.cparams
        # --deterministic: ubatches of up to det_rows rows, whose every row computes as if alone
        # (docs/deterministic.md)
        n_ub = min(c.n_ubatch, self._det_rows()) if c.deterministic else c.n_ubatch
        out: list[UBatch] = []
        self.alloc.split_reset()
        while True:
            ub = self.alloc.split_simple(n_ub) if c.kv_unified or c.n_seq_max == 1 else self.alloc.split_equal(n_ub, sequential=True)
            if ub is None:
                return out
            out.append(ub)

    def _det_rows(self) -> int:
        """--deterministic's rows per ubatch: -ub where every row of such a ubatch computes as if
        alone (the fused layers with rows_det_x86.c's products and each row's own attention
        chunks, and a covered output matrix: docs/deterministic.md), else 1 (each row its own
        ubatch: the one-row kernels; never a silent loss of identity)."""
        from .model.block_matrix import BlockMatrix

        net, c = self.model.net, self.cparams
        fused, out = getattr(net, "fused", None), getattr(net, "output", None)
        ok = (fused is not None and self.model.device.type == "cpu" and c.flash_attn != "off"
              and fused.det_ok(c.type_k, c.type_v) and isinstance(out, BlockMatrix) and out.det_covered)
        return c.n_ubatch if ok else 1

    def _begin_ubatch(self, ub: UBatch, sinfo, memory: Memory):
        """Occupy the ubatch's cells in `memory` and build its graph inputs; (inputs, graph key)."""
        memory.begin_ubatch(ub, sinfo)
        inp = make_inputs(ub, self.model.device, self.cparams.flash_attn != "off", self.graphs, self.cparams.deterministic,
                          self.work)
        bind_slot_info(inp, memory, sinfo)
        if self.model.lora is not None:  # each row: its sequence's adapter scales
            get = self.seq_lora_scales.get
            self.model.lora.set_rows([get(s[0], self.lora_scales) for s in ub.seq_id], list(ub.output), self.model.device)
        key = (ub.n_tokens, self._n_kv_key(memory))
        self.graphs.begin(key)
        return inp, key

    def _output_rows(self, ub: UBatch) -> list[int]:
        """Rows of the decode's logits that the ubatch's output rows fill, in order."""
        out_ids = self.alloc.output_ids
        return [out_ids[ub.idx[r]] for r in range(ub.n_tokens) if ub.output[r]]

    @staticmethod
    def _n_kv_key(memory: Memory) -> tuple[int, ...]:
        """n_kv of every stream of every cache: with the ubatch size, the shape of the graph."""
        caches = getattr(memory, "caches", (memory,))
        return tuple(c.n_kv(st) for c in caches for st in range(c.n_stream))

    # --- outputs --------------------------------------------------------------------------------
    def get_logits(self) -> torch.Tensor:
        """[n_outputs, n_vocab] float32, rows in the order of the flagged slots."""
        return self._logits

    def get_logits_ith(self, i: int) -> torch.Tensor:
        """Logits of batch slot i ([n_vocab] float32); negative i counts outputs from the end
        (llama_get_logits_ith).  Raises IndexError if slot i did not ask for logits."""
        n_out = self._logits.shape[0]
        if i < 0:
            j = n_out + i
            if j < 0:
                raise IndexError(f"output index {i} out of range: the last decode produced {n_out} outputs")
        else:
            if i >= len(self._output_ids):
                raise IndexError(f"batch index {i} out of range: the last batch had {len(self._output_ids)} slots")
            j = self._output_ids[i]
            if j < 0:
                raise IndexError(f"batch slot {i} did not ask for logits (set logits=True in Batch.add)")
        return self._logits[j]

    def close(self) -> None:
        """Release what the context started (a pipeline's stages); nothing for one process."""

    def health_error(self) -> str | None:
        """Why this context can no longer decode, or None (a pipeline's lost stage: pipeline/)."""
        return None

    # --- info -----------------------------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return self.cparams.n_ctx

    @property
    def n_ctx_seq(self) -> int:
        return self.cparams.n_ctx_seq

    def memory_report(self) -> dict[str, int]:
        """Bytes by buffer: model (resident weights), kv_k, kv_v (allocated), compute (the
        worst-case forward of memory/estimate.py), output (logits of the last decode)."""
        return {
            "model": self.model.n_bytes_resident,
            "kv_k": self.memory.size_k_bytes(),
            "kv_v": self.memory.size_v_bytes(),
            "compute": self.estimate.compute,
            "output": self._logits.numel() * 4,
        }


def _log_output_buffer(e: MemoryEstimate, device: torch.device) -> None:
    """llama.cpp's output buffer line: logits live in host memory (CUDA_Host under CUDA)."""
    host = "CUDA_Host" if device.type == "cuda" else "CPU"
    logger("llama_context").info(f"{host:>10}  output buffer size = {e.output / MiB:8.2f} MiB")


def _log_compute_buffer(e: MemoryEstimate, device: torch.device) -> None:
    """llama.cpp's compute buffer line, plus how the reservation splits by phase."""
    log = logger("llama_context")
    log.info(f"{buffer_name(device):>10} compute buffer size = {e.compute / MiB:8.2f} MiB")
    split = ", ".join(f"{k} {v / MiB:.2f}" for k, v in e.compute_by_phase().items())
    log.info(f"compute buffer by phase (MiB; peak = persistent + largest phase): {split}")


def print_memory_breakdown(ctx: "Context", out=None) -> None:
    """The memory breakdown at exit (llama_memory_breakdown_print's role), in MiB."""
    import sys

    r = ctx.memory_report()
    rows = {buffer_name(ctx.model.device): r}
    if ctx.kv_device != ctx.model.device:  # -nkvo: the KV cache is a host buffer of its own
        rows["Host"] = {k: r.pop(k) for k in ("kv_k", "kv_v")}
    for dev, parts_ in rows.items():
        parts = " + ".join(f"{k} {v / MiB:.2f}" for k, v in parts_.items())
        print(f"llama_memory_breakdown_print: | {dev} | {sum(parts_.values()) / MiB:.2f} MiB = {parts} |",
              file=out or sys.stderr)

