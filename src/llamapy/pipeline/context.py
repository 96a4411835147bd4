"""PipelineContext: Context.decode() over a model split by layers across processes (stage 0
is this process).  Stage 0 validates the batch, splits it into ubatches and decides every
ubatch's KV cells (prepare) once; the placement, with each ubatch's rows (tokens, positions,
sequences, output flags), goes to every stage, which applies the same cells.  Then ubatch k's
activations [n_tokens, n_embd] travel stage to stage while stage 0 already runs ubatch k+1:
the seed's ubatches are the pipeline's micro-batches, and a smaller -ub means a smaller
bubble.  The last stage sends back the logits of the output rows only."""
from __future__ import annotations

import atexit
import functools
from dataclasses import replace

import torch

from ..context import Context
from ..model.model import Model
from ..model.stage import StageLayers
from ..params import ContextParams
from .comm import TAG_ACT, TAG_OUT, StageError
from .launch import Pipeline
from .memory import BroadcastMemory
from .stage import StageConfig


class PipelineContext(Context):
    def __init__(self, model: Model, params: ContextParams, pipe: Pipeline, stages: list[StageLayers]) -> None:
        self.pipe = pipe
        self.stages = stages
        super().__init__(model, params)
        self._local = self.memory
        self.memory = BroadcastMemory(self._local, pipe)
        self.stage_reports: list[dict] = [{}]  # per stage: what it allocated (stage 0's below)
        self._open_stages()
        atexit.register(pipe.close)

    def _fitted_n_ctx(self) -> int | None:
        """-c 0: the largest context every host's stages fit (pipeline/estimate.py fit_stages);
        an explicit -c is checked the same way, never changed.  --mem-budget applies to each host."""
        from .estimate import fit_stages

        MiB = 1024 * 1024
        hosts = list(self.pipe.hosts)
        if self.params.mem_budget_mib > 0:
            hosts = [(h, int(self.params.mem_budget_mib * MiB)) for h, _ in hosts]
        else:  # stage 0's weights are loaded already: free memory no longer includes them
            hosts = [(h, b + (self.model.n_bytes_resident if h == hosts[0][0] else 0)) for h, b in hosts]
        budget = {}
        for h, b in hosts:  # stages on one host: its smallest report
            budget[h] = min(budget.get(h, b), b)
        n = fit_stages(self.model, replace(self.params, device="cpu"), self.stages,
                       [(h, budget[h]) for h, _ in hosts])
        return n if self.params.n_ctx == 0 else None

    def _open_stages(self) -> None:
        """Send each stage its layers and the resolved parameters; wait until every one has
        loaded, or raise the first stage's error (its model's own message)."""
        link = self.pipe.link
        path = str(self.model.path)
        for r in range(1, link.world):
            link.send_obj(StageConfig(path, self.stages[r], self.cparams, self.params.n_threads), r)
        for r in range(1, link.world):
            try:
                kind, payload = link.recv_obj(r, timeout_s=max(600.0, link.timeout_s))
            except StageError as e:
                self.pipe.fail(e)
                raise
            if kind == "error":
                e = StageError(f"pipeline stage {r} (layers {self.stages[r].il0}-{self.stages[r].il1 - 1}) "
                               f"could not start: {payload}")
                self.pipe.fail(e)
                raise e
            self.stage_reports.append(payload)
        self.stage_reports[0] = {"weights": self.model.n_bytes_resident, "weights_file": self.model.n_bytes_file,
                                 "kv_k": self._local.size_k_bytes(), "kv_v": self._local.size_v_bytes()}

    @torch.inference_mode()
    def decode(self, batch) -> None:
        """Context.decode through the pipeline.  Bad input and a full cache raise before any
        stage hears of the batch; a lost stage raises StageError (and every later call too)."""
        self.pipe.check()
        self.alloc.init(batch, self._local.seq_pos_max, seq_pos_min=self._local.seq_pos_min)
        ubatches = self._split()
        sinfos = self._local.prepare(ubatches)
        shift = self._local.has_shift()
        try:
            logits = self._run(ubatches, sinfos, shift)
        except StageError as e:
            self.pipe.fail(e)
            raise
        self._logits, self._output_ids = logits, self.alloc.output_ids
        self._count(batch, len(ubatches))

    def _run(self, ubatches: list, sinfos: list, shift: bool) -> torch.Tensor:
        link, net, hp = self.pipe.link, self.model.net, self.model.hparams
        link.broadcast_obj(("decode", (list(zip(ubatches, sinfos)), shift)))
        if shift:
            self._local.apply_shift(functools.partial(net.rotate_k, n_ctx_seq=self.cparams.n_ctx_seq))
        logits = torch.empty(self.alloc.n_outputs, hp.n_vocab, dtype=torch.float32)
        sends = []  # (work, the tensor it sends: alive until sent)
        for ub, sinfo in zip(ubatches, sinfos):  # each ubatch leaves as soon as stage 0 is done with it
            inp, _ = self._begin_ubatch(ub, sinfo, self._local)
            x = net.forward_layers(inp, self._local, net.embed(inp)).contiguous()  # [n_tokens, n_embd]
            sends.append((link.isend(x, 1, TAG_ACT), x))
        for ub in ubatches:
            rows = self._output_rows(ub)
            if rows:
                logits[torch.tensor(rows)] = link.recv((len(rows), hp.n_vocab), link.last, TAG_OUT, "logits")
        for w, _ in sends:
            link.wait_sent(w, 1)
        return logits

    def close(self) -> None:
        """Stop every stage (also at exit)."""
        self.pipe.close()

    def health_error(self) -> str | None:
        """Why this context can no longer decode (a lost stage), or None."""
        return self.pipe.broken or None

    def stage_memory(self) -> list[dict]:
        """What each stage allocated, in bytes: weights (resident), weights_file, kv_k, kv_v."""
        return self.stage_reports
