"""tests/test_deterministic.py's bit-identity at the AVX2 level, in this process (LLAMAPY_CPU_ISA=avx2 for the
module; the level is its own deterministic world: det8_avx2_x86.c's products, attn_det_avx2_x86.c's attention):
SmolLM2's and Gemma 3's target prompt alone, inside ubatches of 2..64 rows with other sequences, chunked
5 + 7 + 12 and after a prompt-cache hit, and a 130-row prompt shared and chunked (its rows' own attention
chunks), torch.equal.  Skipped where the CPU has no AVX2 or is not x86."""
from __future__ import annotations

import pytest
import torch

from llamapy.kernels import load_kernels
from llamapy.kernels.build import IsaError, cpu_features, resolve_level
from llamapy.model.model import Model
from test_deterministic import _check_long_prompt, _variants


@pytest.fixture(scope="module")
def avx2():
    machine, feats = cpu_features()
    try:
        resolve_level("avx2", machine, feats)
    except IsaError as e:
        pytest.skip(f"no AVX2 level here: {e}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLAMAPY_CPU_ISA", "avx2")
        load_kernels.cache_clear()
        lib = load_kernels()
        if lib is None:
            pytest.skip("no C compiler: the CPU kernels are off")
        assert lib.level == "avx2"
        yield lib
    load_kernels.cache_clear()


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request, avx2, smollm2_path, gemma3_path) -> Model:
    return Model.load(smollm2_path if request.param == "smollm2" else gemma3_path)


@pytest.mark.slow
def test_avx2_rows_are_bit_identical(model):
    assert load_kernels().level == "avx2"
    calls = model.net.fused.calls
    v = _variants(model, det=True)
    assert model.net.fused.calls > calls  # the fused layers ran (lp_layers with lp_dims.det)
    bad = [k for k, t in v.items() if not torch.equal(t, v["alone"])]
    assert not bad, f"--deterministic at avx2: the target's logits differ from alone in: {bad}"


@pytest.mark.slow
def test_avx2_long_prompt_keeps_its_rows_attention(model):
    _check_long_prompt(model)
