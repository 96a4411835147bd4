"""What the environment says about this process's part in a pipeline (torch-free: the CLI asks
before it imports torch)."""
from __future__ import annotations

import os
import socket


def under_torchrun() -> bool:
    """Started by torchrun (or another launcher that sets WORLD_SIZE) with more than one rank."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def is_stage_worker() -> bool:
    """Under torchrun, is this process a stage other than stage 0?"""
    return under_torchrun() and int(os.environ.get("RANK", "0")) > 0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
