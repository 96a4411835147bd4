"""Starting and stopping a pipeline's processes.

Under torchrun (WORLD_SIZE set) the ranks are the stages, on one host or several: torchrun's
rendezvous gives every process MASTER_ADDR / MASTER_PORT / RANK, rank 0 runs the command
(it is stage 0) and every other rank becomes a stage worker (cli/main.py sends it to
pipeline/stage.py).  Without torchrun, stage 0 starts the other N - 1 stages itself as local
processes on 127.0.0.1.  Either way the group is gloo's, and no other transport is used."""
from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field

import torch.distributed as dist

from ..log import logger
from .comm import Link, StageError
from .env import free_port, under_torchrun

IDLE_FOREVER = datetime.timedelta(days=3650)  # the group's own timeout; every wait sets its deadline
ENV_TIMEOUT = "LLAMAPY_PP_TIMEOUT"


def hello(link: Link) -> None:
    """A stage's first message to stage 0 (see Pipeline.greet)."""
    from ..memory.fit import default_budget

    link.send_obj((socket.gethostname(), default_budget("cpu")), 0)


def join_group(timeout_s: float | None = None) -> Link:
    """Join the process group described by the environment (torchrun's, or launch_local's)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=IDLE_FOREVER)
    t = float(os.environ.get(ENV_TIMEOUT, "60")) if timeout_s is None else timeout_s
    return Link(rank, world, t)


@dataclass(slots=True)
class Pipeline:
    """Stage 0's handle on the group: the link, and the processes it started (none under torchrun)."""

    link: Link
    procs: list[subprocess.Popen] = field(default_factory=list)
    hosts: list[tuple[str, int]] = field(default_factory=list)  # per stage: host name, its memory budget (bytes)
    broken: str = ""  # the StageError that ended the pipeline, if any
    closed: bool = False

    @classmethod
    def start(cls, pp: int, timeout_s: float) -> "Pipeline":
        """Stage 0 of a pipeline of pp stages: joins torchrun's group (its world must be pp),
        or starts pp - 1 local stage processes and forms the group with them."""
        if under_torchrun():
            world = int(os.environ["WORLD_SIZE"])
            if world != pp:
                raise StageError(f"--pp {pp} but torchrun started {world} processes (--nproc-per-node x --nnodes): "
                                 f"they must be equal")
            return cls(join_group(timeout_s)).greet()
        port = free_port()
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(pp),
                   **{ENV_TIMEOUT: str(timeout_s)})
        procs = [subprocess.Popen([sys.executable, "-m", "llamapy.pipeline.stage"], env=dict(env, RANK=str(r)))
                 for r in range(1, pp)]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        try:
            dist.init_process_group("gloo", rank=0, world_size=pp, timeout=IDLE_FOREVER,
                                    init_method=f"tcp://127.0.0.1:{port}")
        except Exception:
            for p in procs:
                p.kill()
                p.wait()
            raise
        logger("pipeline").info(f"started {pp - 1} local stage process(es): pids {[p.pid for p in procs]}")
        return cls(Link(0, pp, timeout_s), procs).greet()

    def greet(self) -> "Pipeline":
        """Every stage's first message: its host and that host's memory budget (for the fitter)."""
        from ..memory.fit import default_budget

        self.hosts = [(socket.gethostname(), default_budget("cpu"))]
        for r in range(1, self.link.world):
            try:
                self.hosts.append(tuple(self.link.recv_obj(r, timeout_s=max(600.0, self.link.timeout_s))))
            except StageError as e:
                self.fail(e)
                raise
        return self

    def fail(self, e: StageError) -> None:
        """Mark the pipeline broken (every later call raises the same error) and stop the stages."""
        if not self.broken:
            self.broken = str(e)
            logger("pipeline").error(f"pipeline stopped: {e}")
            self.close(graceful=False)

    def check(self) -> None:
        if self.broken:
            raise StageError(self.broken)

    def close(self, graceful: bool = True) -> None:
        """Tell every stage to stop, wait for the local ones (killing those that do not exit
        within 5 s), and leave the group."""
        if self.closed:
            return
        self.closed = True
        if graceful and not self.broken:
            try:
                self.link.broadcast_obj(("stop", ()))
            except StageError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=5 if graceful else 0.5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        try:
            dist.destroy_process_group()
        except Exception:
            pass
