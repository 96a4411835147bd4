"""`llamapy quantize` to IQ4_NL, IQ4_XS, MXFP4_MOE and the K mixes (Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M)
against llama-quantize's own output (tests/data/quantize_ref, made by scripts/ref_quantize.py from
the same tiny F32 files): every tensor's type as llama-quantize chose it and every tensor's bytes
identical (sha256; for the IQ4 / MXFP4 cases the asked type's bytes are kept too, to count the
rows that differ)."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from llamapy.quantize import mix_type, quantize_file

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "tests/data/quantize_ref"
sys.path.insert(0, str(ROOT / "scripts"))
from ref_quantize import CASES, tensors_sha256, write_input  # noqa: E402


@pytest.mark.parametrize("case", list(CASES))
def test_types_and_bytes_equal_llama_quantize(case, tmp_path):
    ref = json.loads((REF / f"{case}.json").read_text())
    src = write_input(case, tmp_path / f"{case}-f32.gguf")
    assert tensors_sha256(src) == ref["input_sha256"], "the tiny writer changed: rerun scripts/ref_quantize.py"
    dst = tmp_path / f"{case}.gguf"
    rep = quantize_file(src, dst, ref["type"])
    r = gguf.GGUFReader(dst)
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(ref["tensors"])
    types = {name: gguf.GGMLQuantizationType(t.tensor_type).name for name, t in got.items()}
    assert types == ref["tensors"]
    assert int(r.fields["general.file_type"].contents()) == mix_type(ref["type"])[1]
    differ = [name for name, t in got.items()
              if hashlib.sha256(np.ascontiguousarray(t.data).tobytes()).hexdigest() != ref["sha256"][name]]
    assert not differ, f"{len(differ)} of {len(got)} tensors' bytes differ from llama-quantize's: {differ}"
    if not CASES[case][3]:
        return
    blocks = np.load(REF / f"{case}.npz")
    assert len(blocks.files) >= 3
    for name in blocks.files:
        ours = np.ascontiguousarray(got[name].data).view(np.uint8)
        theirs = blocks[name]
        assert ours.shape == theirs.shape, name
        diff = (ours != theirs).any(axis=-1).mean()  # fraction of rows with any byte different
        assert diff == 0, f"{name}: {diff:.2%} of rows differ from llama-quantize's"


def test_mxfp4_alias_and_bad_type(tmp_path):
    """MXFP4 names the MXFP4_MOE mix; an unknown type lists the ones written."""
    from llamapy.quantize import QuantizeError, mix_type

    assert mix_type("mxfp4") == mix_type("MXFP4_MOE") == (gguf.GGMLQuantizationType.MXFP4, 38)
    with pytest.raises(QuantizeError, match="IQ4_XS"):
        mix_type("IQ3_S")
