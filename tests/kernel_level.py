"""The C kernels of one ISA level for a test, or a skip that says why this machine has none."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def row1_i8(lib: KernelLib, on: int) -> Iterator[None]:
    """lp_row1_i8_set(on) for the block (1: the one-row int8 form for every type it covers, 0: off),
    the level's default (-1) after it whatever happens."""
    lib.fn.lp_row1_i8_set(on)
    try:
        yield
    finally:
        lib.fn.lp_row1_i8_set(-1)
