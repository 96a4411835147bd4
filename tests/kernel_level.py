"""The C kernels of one ISA level for a test, or a skip that says why this machine has none."""
from __future__ import annotations

import pytest

from llamapy.kernels import load_kernels
from llamapy.kernels.build import IsaError
from llamapy.kernels.lib import KernelLib


def kernels_at(level: str) -> KernelLib:
    """load_kernels(level); pytest.skip naming the reason when this CPU does not run the level or
    no C compiler built them."""
    try:
        k = load_kernels(level)
    except IsaError as e:
        pytest.skip(f"this CPU does not run the {level} level: {e}")
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off")
    return k
