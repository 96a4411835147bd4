"""lp_mm_for's tasks of a wide product in lanes (kernels/c/mm_lanes.h task_rows: LANES_WIDE output
rows a task where CHUNK's 16 cost each chunk's setup and a cache line a y row; AVX2, Q8_0's int16
lanes and the 32-blocks' int8 lanes at 5+ rows): each output column the same bits as the same
weight rows' product in a narrow matrix (16-row tasks), at one and two threads, written (=) and
accumulated (+=), a last task cut short (n_out not a multiple of the task's rows).  Skipped where
the CPU has no AVX2."""
from __future__ import annotations

import gguf
import pytest
import torch

from llamapy.model.block_matrix import block_matrix
from test_kernels import _matrix
from test_lanes8 import avx2  # noqa: F401  (the module's AVX2 kernels)

T = gguf.GGMLQuantizationType
N_OUT, N_IN, SLICE = 2084, 640, 96  # 2084 = 16 x 128 + 36 (2 threads: 8 tasks each); a 96-row slice stays in 16-row tasks at any thread count


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q5_0, T.Q4_1], ids=lambda t: t.name)
def test_wide_tasks_are_the_narrow_products(avx2, qtype, threads):  # noqa: F811
    raw, _ = _matrix(qtype, (N_OUT, N_IN), seed=7)
    rb = raw.numel() // N_OUT
    whole = block_matrix([(raw, qtype, (N_OUT, N_IN))], avx2)
    x = torch.randn(17, N_IN, generator=torch.Generator().manual_seed(8)) * 2.0
    keep = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for n in (5, 16, 17):
            y = whole(x[:n])
            acc = torch.full((n, N_OUT), 0.25)
            whole.add_into(x[:n], acc)
            for o0 in range(0, N_OUT, SLICE):
                o1 = min(o0 + SLICE, N_OUT)
                part = block_matrix([(raw[o0 * rb : o1 * rb].clone(), qtype, (o1 - o0, N_IN))], avx2)
                want = part(x[:n])
                assert torch.equal(y[:, o0:o1], want), (n, o0)
                want_acc = torch.full((n, o1 - o0), 0.25)
                part.add_into(x[:n], want_acc)
                assert torch.equal(acc[:, o0:o1], want_acc), (n, o0, "+=")
    finally:
        torch.set_num_threads(keep)
