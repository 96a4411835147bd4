"""A pipeline stage other than stage 0 (a process of its own): it waits for stage 0's
configuration, loads its layers (mapped from the file: its resident weights are its share)
and its layers' KV cache, reports what it allocated, then follows stage 0's commands until
told to stop or until stage 0 is gone.

Per decode it applies the placement stage 0 decided (the ubatches' cells, so every stage's
cells stay the same), rotates its K after a seq_add (K-shift), and for each ubatch in order
takes the activations from the stage before, runs its layers, and passes the result on; the
last stage sends the output rows' logits to stage 0."""
from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass

import torch

from ..memory.factory import bind_slot_info, create_memory
from ..model.graph import make_inputs
from ..model.stage import StageLayers
from .comm import TAG_ACT, TAG_OUT, Link, StageError


@dataclass(frozen=True, slots=True)
class StageConfig:
    """What stage 0 sends each stage before anything loads."""

    path: str  # the GGUF file (the same path on every host)
    stage: StageLayers
    cparams: object  # CParams, resolved once on stage 0
    n_threads: int


class StageWorker:
    def __init__(self, link: Link) -> None:
        self.link = link
        self.net = self.memory = self.cparams = None
        self.n_embd = 0

    def serve(self) -> int:
        """The stage's whole life; returns the process exit code."""
        try:
            cfg: StageConfig = self.link.recv_obj(0, timeout_s=0)
        except StageError:
            return 1
        if isinstance(cfg, tuple):  # ("stop", ()): stage 0 failed before it configured this stage
            return 0
        try:
            report = self._open(cfg)
        except Exception as e:  # the model's own message goes back to stage 0, which reports it
            self.link.send_obj(("error", f"{type(e).__name__}: {e}"), 0)
            return 1
        self.link.send_obj(("ready", report), 0)
        while True:
            try:
                op, args = self.link.recv_obj(0, timeout_s=0)
            except StageError:  # stage 0 is gone: nothing left to serve
                return 0
            if op == "stop":
                return 0
            if op == "decode":
                self._decode(*args)
            else:
                getattr(self.memory, op)(*args)

    def _open(self, cfg: StageConfig) -> dict:
        from ..model.model import Model

        if cfg.n_threads > 0:
            torch.set_num_threads(cfg.n_threads)
        model = Model.load(cfg.path, device="cpu", stage=cfg.stage, tokenizer=False)
        self.net, self.cparams = model.net, cfg.cparams
        self.memory = create_memory(model.hparams, cfg.cparams, "cpu", cfg.stage.ids)
        self.n_embd = model.hparams.n_embd
        self.last = cfg.stage.last
        return {"weights": model.n_bytes_resident, "weights_file": model.n_bytes_file,
                "kv_k": self.memory.size_k_bytes(), "kv_v": self.memory.size_v_bytes(), "pid": os.getpid()}

    @torch.inference_mode()
    def _decode(self, work: list, shift: bool) -> None:
        if shift:
            self.memory.apply_shift(functools.partial(self.net.rotate_k, n_ctx_seq=self.cparams.n_ctx_seq))
        flash = self.cparams.flash_attn != "off"
        sends = []
        for ub, sinfo in work:
            self.memory.begin_ubatch(ub, sinfo)
            inp = make_inputs(ub, torch.device("cpu"), flash)
            bind_slot_info(inp, self.memory, sinfo)
            x = self.link.recv((ub.n_tokens, self.n_embd), self.link.rank - 1, TAG_ACT, "activations")
            x = self.net.forward_layers(inp, self.memory, x)
            if not self.last:
                x = x.contiguous()
                sends.append((self.link.isend(x, self.link.rank + 1, TAG_ACT), x, self.link.rank + 1))
                continue
            out = self.net.logits(inp, x).float().contiguous()  # [n_outputs(ub), n_vocab]
            if out.shape[0]:
                sends.append((self.link.isend(out, 0, TAG_OUT), out, 0))
        for w, _, dst in sends:
            self.link.wait_sent(w, dst)


def main() -> int:
    """Entry point of a stage process (started by pipeline/launch.py, or by torchrun through
    the CLI): rank and world from the environment."""
    from .launch import hello, join_group

    link = join_group()
    hello(link)
    code = StageWorker(link).serve()
    sys.stdout.flush()
    os._exit(code)  # no teardown handshake with a stage 0 that may be gone


if __name__ == "__main__":
    main()
