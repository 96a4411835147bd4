"""The decode attention's head groups (kernels/c/attn_x86.c): the query heads that share a KV
head are scored and summed several to a pass over the K and V rows, and each head's output must
be the bits it gets alone -- the same heads each given its own copy of the KV head (one head a
pass).  Run at the level LLAMAPY_CPU_ISA names (avx2 / native / scalar)."""
from __future__ import annotations

import pytest
import torch

from llamapy.kernels import load_kernels
from llamapy.kernels import ops as kops
from llamapy.kernels.types import c_kv_types


@pytest.fixture(scope="module")
def lib():
    k = load_kernels()
    if k is None:
        pytest.skip("no C compiler: the CPU kernels are off")
    return k


def _spread(w: torch.Tensor, n_head_kv: int, group: int) -> torch.Tensor:
    """w [n_cells, n_head_kv * d] -> [n_cells, n_head_kv * group * d]: each KV head's part
    repeated for each of its group's query heads."""
    n_cells = w.shape[0]
    return w.view(n_cells, n_head_kv, 1, -1).expand(-1, -1, group, -1).reshape(n_cells, -1).contiguous()


# (n_head, n_head_kv, d): groups of 4 (Gemma 3, Llama 3), 3 (SmolLM2), 8, 6 (4 + 2), 5 (4 + 1), 2
@pytest.mark.parametrize("n_head,n_head_kv,d", [(4, 1, 256), (8, 2, 64), (9, 3, 64), (8, 1, 32), (6, 1, 64), (5, 1, 32),
                                                (2, 1, 64)])
@pytest.mark.parametrize("n_kv", [45, 131])  # cells not a multiple of 8: the scalar tail too
@pytest.mark.parametrize("cache", ["f16", "q8_0"])
def test_grouped_heads_are_each_head_alone(lib, n_head, n_head_kv, d, n_kv, cache):
    g = torch.Generator().manual_seed(7)
    n, n_cells, group = 32, n_kv + 8, n_head // n_head_kv  # 32 rows: one chunk a (row, KV head) at 8 threads
    q = torch.randn(n, n_head, d, generator=g)
    k = torch.randn(n_cells, n_head_kv * d, generator=g)
    v = torch.randn(n_cells, n_head_kv * d, generator=g)
    visible = torch.rand(n, n_kv, generator=g) < 0.7
    visible[:, 0] = True
    mask = torch.zeros(n, n_kv).masked_fill_(~visible, float("-inf"))
    mask[:, 1::3] += 0.25  # mask values other than 0 / -inf: each cell's own must be added (and a scale
    # not a power of 2 below: scale x sum rounds)
    if cache == "f16":
        together = kops.attn_f16(lib, q, k.half(), v.half(), n_kv, n_head_kv, mask, 0.1)
        alone = kops.attn_f16(lib, q, _spread(k.half(), n_head_kv, group), _spread(v.half(), n_head_kv, group), n_kv, n_head,
                              mask, 0.1)
    else:
        from llamapy.gguf.quants import quantize
        import gguf

        qt = gguf.GGMLQuantizationType.Q8_0
        types = c_kv_types("q8_0", "q8_0", d, d)
        together = kops.attn_kv(lib, q, quantize(k, qt), quantize(v, qt), types, n_kv, n_head_kv, d, mask, 0.1)
        alone = kops.attn_kv(lib, q, quantize(_spread(k, n_head_kv, group), qt), quantize(_spread(v, n_head_kv, group), qt),
                             types, n_kv, n_head, d, mask, 0.1)
    assert torch.equal(together, alone)
