"""BroadcastMemory: stage 0's view of the pipeline's KV memory.  Every stage keeps the whole
model's cell bookkeeping and the tensors of its own layers; the llama_memory calls that
change cells (seq_rm, seq_cp, seq_keep, seq_add, seq_div, clear) are sent to every stage
before stage 0 applies them, so the stages' cells stay in step.  K-shift follows: each stage
sees the same pending shifts and rotates its own layers at the next decode.  Reads go to
stage 0's memory as they are."""
from __future__ import annotations

from .comm import StageError

CHANGES = ("seq_rm", "seq_cp", "seq_keep", "seq_add", "seq_div", "clear")


class BroadcastMemory:
    def __init__(self, local, pipe) -> None:
        self.local = local  # stage 0's KVCache / KVCacheISWA (memory/factory.py unwraps to it)
        self._pipe = pipe  # launch.Pipeline

    def __getattr__(self, name: str):
        return getattr(self.local, name)

    def _change(self, op: str, *args):
        """Every stage first, then stage 0.  Once the pipeline is broken only stage 0's cells
        change (the server still frees its slots; no stage will decode again)."""
        if not self._pipe.broken:
            try:
                self._pipe.link.broadcast_obj((op, args))
            except StageError as e:
                self._pipe.fail(e)
                raise
        return getattr(self.local, op)(*args)

    def seq_rm(self, s: int, p0: int = -1, p1: int = -1) -> bool:
        return self._change("seq_rm", s, p0, p1)

    def seq_cp(self, s_src: int, s_dst: int, p0: int = -1, p1: int = -1) -> None:
        return self._change("seq_cp", s_src, s_dst, p0, p1)

    def seq_keep(self, s: int) -> None:
        return self._change("seq_keep", s)

    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None:
        return self._change("seq_add", s, p0, p1, delta)

    def seq_div(self, s: int, p0: int, p1: int, d: int) -> None:
        return self._change("seq_div", s, p0, p1, d)

    def clear(self, data: bool = False) -> None:
        return self._change("clear", data)
