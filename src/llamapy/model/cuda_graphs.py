"""CUDA graphs for decode: llama.cpp's CUDA backend replays a captured graph while the
ubatch keeps its shape; here one graph per key (n_tokens, n_outputs, and per cache its stream
and n_kv -- n_kv moves in steps of 256 cells, so single-stream decode captures at most once
per 256 steps).  A graph reads its inputs from static tensors that each step overwrites
in place: tokens, positions, output rows, and per cache the cells the rows are stored in and
the KQ masks (written by KVCache.kq_mask straight into them).

Per key:
  1st ubatch   eager (the warm-up), noting which (cache, swa) masks the forward asks for
  2nd          captured; the graph's output checked against the eager forward of the step
  3rd          replayed and checked once more, against inputs the capture never saw
  later        replayed only
Any exception or mismatch turns the graphs off for the context (logged once, with the
reason), and the eager forward's result is used: a graph can cost speed, never correctness.
The KV writes of a checked step happen twice, with the same values into the same cells.

`emulate=True` keeps all of this but "captures" by remembering the forward and "replays" by
running it on the static inputs: on the CPU the tests use it to prove that every input a
step changes reaches the graph through the static tensors.  LLAMAPY_CUDA_GRAPHS=0 turns
graphs off."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from ..log import logger
from .graph import AttnGroup, UBatchInputs

GRAPH_MAX_TOKENS = 32  # ubatches of fewer rows (decode) are graphed; prompts run eagerly
MAX_GRAPHS = 8  # keys kept (least recently used dropped)


@dataclass(slots=True)
class _Entry:
    """One key's static inputs, graph and state."""

    tokens: torch.Tensor  # [n_tokens] long
    pos: torch.Tensor  # [n_tokens] long
    out_rows: torch.Tensor  # [n_outputs] long
    rows: torch.Tensor  # [n_tokens] long: arange (every row in the one stream group)
    cells: dict[int, torch.Tensor] = field(default_factory=dict)  # id(cache) -> [n_tokens] long
    masks: dict[tuple[int, bool], torch.Tensor] = field(default_factory=dict)  # (id(cache), swa) -> [n_tokens, n_kv]
    replay: Callable[[], None] | None = None
    out: torch.Tensor | None = None  # the graph's output [n_outputs, n_vocab]
    state: int = 0  # 0 warmed up, 1 captured (checked once), 2 checked twice: replay only


@dataclass(slots=True)
class CudaGraphs:
    emulate: bool = False
    enabled: bool = True
    n_captures: int = 0
    n_replays: int = 0  # replays whose output was used without an eager run
    n_checks: int = 0  # replays compared with the eager forward
    disabled_reason: str = ""
    _entries: dict[tuple, _Entry] = field(default_factory=dict)

    @classmethod
    def for_device(cls, device: torch.device) -> "CudaGraphs | None":
        """Graphs for a CUDA model (unless LLAMAPY_CUDA_GRAPHS=0); None elsewhere."""
        if device.type != "cuda" or os.environ.get("LLAMAPY_CUDA_GRAPHS", "1") == "0":
            return None
        return cls()

    def forward(self, net, inp: UBatchInputs, memory, key: tuple) -> torch.Tensor:
        """net.forward(inp, memory), through this key's graph when it has one (see the module
        doc).  key: the ubatch's graph shape (Context: n_tokens and every stream's n_kv)."""
        caches = getattr(memory, "caches", (memory,))
        where = self._where(inp, caches)
        if where is None:
            return net.forward(inp, memory)
        gkey = (key, int(inp.out_rows.shape[0]), tuple(st for st, _ in where))
        e = self._entries.pop(gkey, None)
        if e is None:
            out = net.forward(inp, memory)  # the warm-up, which also shows the masks it used
            self._remember(gkey, self._new_entry(inp, caches, where))
            return out
        self._entries[gkey] = e  # most recent last
        try:
            self._fill(e, inp, caches, where)
            if e.state == 2:
                e.replay()
                self.n_replays += 1
                return e.out.clone()
            if e.state == 0:
                self._capture(e, net, inp, memory, caches, where)
            else:
                e.replay()
            got = e.out.clone()
        except Exception as ex:  # noqa: BLE001  (any failure: eager from now on)
            self._disable(f"{type(ex).__name__}: {ex}")
            return net.forward(inp, memory)
        out = net.forward(inp, memory)
        self.n_checks += 1
        if got.shape != out.shape or not torch.allclose(got, out, rtol=1e-3, atol=1e-3 * (1 + out.abs().max().item())):
            self._disable(f"a replay differs from the eager forward by {(got - out).abs().max().item():.3g}")
        else:
            e.state += 1
        return out

    # --- internals ------------------------------------------------------------------------------
    def _where(self, inp: UBatchInputs, caches) -> list[tuple[int, np.ndarray]] | None:
        """Per cache, the one stream the ubatch is in and its rows (all of them); None when the
        ubatch is not graphed (graphs off, too many rows, rows in several streams: the
        grouping would change from step to step)."""
        n = int(inp.tokens.shape[0])
        if not self.enabled or n == 0 or n >= GRAPH_MAX_TOKENS:
            return None
        where = []
        for c in caches:
            groups = inp.sinfo[id(c)].groups()
            if len(groups) != 1:
                return None
            where.append(groups[0])
        return where

    def _remember(self, gkey: tuple, e: _Entry) -> None:
        if len(self._entries) >= MAX_GRAPHS:
            self._entries.pop(next(iter(self._entries)))
        self._entries[gkey] = e

    def _new_entry(self, inp: UBatchInputs, caches, where) -> _Entry:
        dev, n = inp.tokens.device, int(inp.tokens.shape[0])
        e = _Entry(tokens=inp.tokens.clone(), pos=inp.pos.clone(), out_rows=inp.out_rows.clone(),
                   rows=torch.arange(n, device=dev))
        stream = {id(c): (c, st) for c, (st, _) in zip(caches, where)}
        for cid, swa, *_ in inp.masks:  # the masks the warm-up forward built
            c, st = stream[cid]
            e.masks[(cid, swa)] = torch.empty(n, c.n_kv(st), dtype=torch.float32, device=c.device)
        for c in caches:
            e.cells[id(c)] = torch.empty(n, dtype=torch.long, device=c.device)
        return e

    def _fill(self, e: _Entry, inp: UBatchInputs, caches, where) -> None:
        """This step's inputs into the static tensors (the graph reads nothing else)."""
        e.tokens.copy_(inp.tokens)
        e.pos.copy_(inp.pos)
        e.out_rows.copy_(inp.out_rows)
        for c, (st, rows) in zip(caches, where):
            e.cells[id(c)].copy_(torch.from_numpy(inp.sinfo[id(c)].idxs[rows]))
            for (cid, swa), m in e.masks.items():
                if cid == id(c):
                    c.kq_mask(inp.ubatch, st, rows, m.shape[1], swa, out=m)

    def _static_inputs(self, e: _Entry, inp: UBatchInputs, caches, where) -> UBatchInputs:
        """UBatchInputs over the static tensors, with the store plans and attention groups
        already made, so the forward computes nothing on the host."""
        s = UBatchInputs(ubatch=inp.ubatch, tokens=e.tokens, pos=e.pos, out_rows=e.out_rows, flash_attn=inp.flash_attn,
                         sinfo=inp.sinfo)
        for c, (st, _) in zip(caches, where):
            s.plans[id(c)] = [(st, e.cells[id(c)], e.rows)]
            for (cid, swa), m in e.masks.items():
                if cid == id(c):
                    s.set_groups(cid, swa, [AttnGroup(e.rows, st, m.shape[1], m)])
        return s

    def _capture(self, e: _Entry, net, inp: UBatchInputs, memory, caches, where) -> None:
        sinp = self._static_inputs(e, inp, caches, where)
        if self.emulate:
            def replay() -> None:
                e.out.copy_(net.forward(sinp, memory))

            e.out = net.forward(sinp, memory)
            e.replay = replay
        else:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
                net.forward(sinp, memory)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                e.out = net.forward(sinp, memory)
            e.replay = g.replay
            g.replay()
        self.n_captures += 1

    def _disable(self, reason: str) -> None:
        self.enabled = False
        self.disabled_reason = reason
        self._entries.clear()
        logger("llama_context").warning(f"CUDA graphs disabled, decoding eagerly from now on: {reason}")
