"""Link: the point-to-point messages between pipeline stages, over torch.distributed (gloo on
the CPU).  Three kinds, each on its own tag so that they never mix on one pair of ranks:
control objects from stage 0 (pickled: op name and arguments), activations along the chain
(float32 [n_tokens, n_embd] per ubatch) and logits from the last stage back to stage 0.

Every wait has a deadline (--pp-timeout); a stage that died closes its connections and the
wait fails at once.  Either way the link is broken for good (gloo closes the pair on a
timeout) and raises StageError, which names the stage."""
from __future__ import annotations

import datetime
import pickle
from dataclasses import dataclass

import torch
import torch.distributed as dist

TAG_CTL, TAG_ACT, TAG_OUT = 1, 2, 3


class StageError(RuntimeError):
    """A pipeline stage died or did not answer in time; the pipeline cannot go on."""


@dataclass(slots=True)
class Link:
    rank: int
    world: int
    timeout_s: float  # --pp-timeout: the longest wait for another stage's message

    @property
    def last(self) -> int:
        return self.world - 1

    def _wait(self, start, peer: int, what: str, timeout_s: float | None) -> None:
        """start() -> the op's Work (gloo raises from the call itself when the pair is closed);
        wait for it under the deadline."""
        t = self.timeout_s if timeout_s is None else timeout_s
        try:
            work = start() if callable(start) else start
            if t > 0:
                work.wait(datetime.timedelta(seconds=t))
            else:
                work.wait()
        except RuntimeError as e:
            why = "stopped answering" if "imed out" in str(e) else "is gone"
            raise StageError(f"pipeline stage {peer} {why} (waiting for {what}"
                             f"{f', --pp-timeout {t:g} s' if why != 'is gone' else ''}): {str(e).splitlines()[0][:160]}") from None

    def send_obj(self, obj, dst: int) -> None:
        data = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)
        n = torch.tensor([data.numel()], dtype=torch.int64)
        self._wait(lambda: dist.isend(n, dst, tag=TAG_CTL), dst, "a control message to be taken", None)
        self._wait(lambda: dist.isend(data, dst, tag=TAG_CTL), dst, "a control message to be taken", None)

    def recv_obj(self, src: int, timeout_s: float | None = None):
        """The next control object from src; timeout_s 0 waits without a deadline (a stage
        idling between requests)."""
        n = torch.zeros(1, dtype=torch.int64)
        self._wait(lambda: dist.irecv(n, src, tag=TAG_CTL), src, "a control message", timeout_s)
        data = torch.empty(int(n.item()), dtype=torch.uint8)
        self._wait(lambda: dist.irecv(data, src, tag=TAG_CTL), src, "a control message", None)
        return pickle.loads(data.numpy().tobytes())

    def broadcast_obj(self, obj) -> None:
        """Stage 0: the same control object to every other stage."""
        for r in range(1, self.world):
            self.send_obj(obj, r)

    def isend(self, t: torch.Tensor, dst: int, tag: int):
        """Start sending t (kept alive by the caller until wait_sent)."""
        try:
            return dist.isend(t, dst, tag=tag)
        except RuntimeError as e:
            raise StageError(f"pipeline stage {dst} is gone (sending activations): {str(e).splitlines()[0][:160]}") from None

    def wait_sent(self, work, dst: int) -> None:
        self._wait(work, dst, "activations to be taken", None)

    def recv(self, shape: tuple[int, ...], src: int, tag: int, what: str) -> torch.Tensor:
        t = torch.empty(shape, dtype=torch.float32)
        self._wait(lambda: dist.irecv(t, src, tag=tag), src, what, None)
        return t
