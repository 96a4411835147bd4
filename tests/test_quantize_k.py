"""The Q4_K / Q5_K quantizers (gguf/quants_pack_k45.py) and the K mixes of `llamapy quantize`
(Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M): their bytes against llama-quantize's are in
tests/test_quantize_iq.py (every tensor's sha256, tests/data/quantize_ref); here the blocks decode
(through the gguf package's own dequantizer) to within each type's error, the llama-quantize
aliases, and a K-mix file loads and runs close to its F32 source."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from llamapy.cli import main
from llamapy.gguf.quants_pack_k45 import quantize_q4_k, quantize_q5_k
from llamapy.quantize import mix_type, quantize_file
from test_quantize import six_token_logits

T = gguf.GGMLQuantizationType


@pytest.fixture(scope="module")
def tiny256(tmp_path_factory) -> Path:
    from tiny_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("qk") / "tiny256.gguf", n_embd=256, n_layer=2, n_head=4,
                            n_head_kv=2, n_ff=512)


@pytest.mark.parametrize("qtype,fn,nbytes,bound", [(T.Q4_K, quantize_q4_k, 144, 0.11), (T.Q5_K, quantize_q5_k, 176, 0.055)])
def test_k_blocks_decode_within_their_error(qtype, fn, nbytes, bound):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 256, generator=g) * torch.rand(64, 1, generator=g)  # [64, 256] blocks of different scales
    x[3] = 0.0
    x[5, 64:96] = 0.0  # a zero sub-block
    x[6] = x[6].abs() + 0.5  # all positive: min 0
    b = fn(x)
    assert b.shape == (64, nbytes) and b.dtype == torch.uint8
    y = torch.from_numpy(gguf.quants.dequantize(b.numpy(), qtype).reshape(64, 256))
    assert torch.all(y[3] == 0) and torch.all(y[5, 64:96].abs() < 0.02 * x[5].abs().max())
    err = ((y - x).pow(2).mean() / x.pow(2).mean()).sqrt().item()
    assert err < bound, err
    q8 = gguf.quants.dequantize(gguf.quants.quantize(x.numpy(), T.Q8_0), T.Q8_0)
    assert err > float(np.sqrt(((q8 - x.numpy()) ** 2).mean() / (x.numpy() ** 2).mean()))


def test_aliases_and_file_types():
    assert mix_type("q4_k") == mix_type("Q4_K_M") == (T.Q4_K, 15)
    assert mix_type("Q5_K") == mix_type("q5_k_m") == (T.Q5_K, 17)
    assert mix_type("Q4_K_S") == (T.Q4_K, 14) and mix_type("Q5_K_S") == (T.Q5_K, 16)


@pytest.mark.parametrize("type_name", ["Q4_K_M", "Q5_K_S"])
def test_k_mix_model_runs_close_to_its_source(tiny256, tmp_path, capsys, type_name):
    """The CLI writes the mix without warnings; the file loads and its logits stay near the F32
    model's (this random tiny model is touchy: its Q5_1 file's cosines go down to 0.87, Q4_0's mean
    is 0.91; blocks read in the wrong order give about 0)."""
    dst = tmp_path / f"tiny-{type_name}.gguf"
    assert main(["quantize", str(tiny256), str(dst), type_name]) == 0
    assert "warning" not in capsys.readouterr().err
    types = {gguf.GGMLQuantizationType(t.tensor_type) for t in gguf.GGUFReader(dst).tensors}
    assert mix_type(type_name)[0] in types and T.Q6_K in types  # the output matrix (tied token_embd)
    a, q = six_token_logits(tiny256), six_token_logits(dst)
    cos = torch.nn.functional.cosine_similarity(a.float(), q.float(), dim=-1)
    assert cos.mean() > 0.9 and torch.all(cos > 0.8), cos
