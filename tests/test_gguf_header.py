"""gguf/header.py: the header-only reader agrees with gguf.GGUFReader on every key and tensor
info, skips what it does not need, and is fast."""
from __future__ import annotations

import time

import pytest

from llamapy.gguf.header import ArrayRef, GGUFHeader
from llamapy.gguf.reader import GGUFFile
from llamapy.model.hparams import hparams_from_gguf


def _same_as_gguf_reader(path) -> GGUFHeader:
    h = GGUFHeader(path)
    f = GGUFFile(path)  # gguf.GGUFReader underneath
    r = f.reader
    fields = {k: fld for k, fld in r.fields.items() if not k.startswith("GGUF.")}
    assert list(h.fields) == list(fields)
    for k, fld in fields.items():
        v = h.get(k)
        if isinstance(v, ArrayRef):
            assert len(v) == len(fld.data), k
        elif isinstance(v, float):
            assert v == pytest.approx(fld.contents(), rel=1e-7), k
        else:
            assert v == fld.contents(), k
    assert len(h.tensors) == len(r.tensors)
    for t in r.tensors:
        mine = h.tensors[t.name]
        assert (mine.qtype, mine.ne, mine.n_bytes) == (t.tensor_type, tuple(int(x) for x in t.shape), int(t.n_bytes)), t.name
    assert hparams_from_gguf(h) == hparams_from_gguf(f)
    return h


def test_tiny_model_header_equals_gguf_reader(tiny_path):
    h = _same_as_gguf_reader(tiny_path)
    assert h.arch == "llama" and h.version == 3


@pytest.mark.slow
def test_smollm2_header_equals_gguf_reader(smollm2_path):
    h = _same_as_gguf_reader(smollm2_path)
    assert isinstance(h.get("tokenizer.ggml.tokens"), ArrayRef) and len(h.get("tokenizer.ggml.tokens")) == 49152


@pytest.mark.slow
def test_gemma3_header_equals_gguf_reader(gemma3_path):
    _same_as_gguf_reader(gemma3_path)


def test_header_is_fast(smollm2_path):
    t0 = time.perf_counter()
    h = GGUFHeader(smollm2_path)
    hparams_from_gguf(h)
    assert time.perf_counter() - t0 < 0.5  # gguf.GGUFReader: ~3.5 s on this file
    assert h.header_bytes < h.file_size() // 10


def test_rejects_non_gguf_and_truncated(tmp_path, tiny_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGML" + bytes(100))
    with pytest.raises(ValueError, match="not a valid GGUF file"):
        GGUFHeader(bad)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_path.read_bytes()[:200])
    with pytest.raises(ValueError, match="truncated|runs past"):
        GGUFHeader(cut)
    with pytest.raises(FileNotFoundError):
        GGUFHeader(tmp_path / "missing.gguf")
