"""gguf/header.py and gguf/reader.py: the header walk and the mapped file agree with
gguf.GGUFReader on every key, every array element and every tensor's bytes (real files and
the tiny GGUFs the tests write), are fast, and refuse hostile files with the byte offset."""
from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from llamapy.gguf.header import ArrayRef, GGUFHeader
from llamapy.gguf.reader import GGUFFile
from llamapy.model.hparams import hparams_from_gguf


def _same_as_gguf_reader(path) -> GGUFHeader:
    """Every field and tensor of GGUFHeader and GGUFFile against gguf.GGUFReader."""
    h = GGUFHeader(path)
    f = GGUFFile(path)
    r = gguf.GGUFReader(str(path), "r")
    fields = {k: fld for k, fld in r.fields.items() if not k.startswith("GGUF.")}
    assert list(h.fields) == list(fields) == list(f.fields)
    for k, fld in fields.items():
        v = h.get(k)
        assert f.get(k) == v or isinstance(v, float), k
        if isinstance(v, ArrayRef):
            assert len(v) == len(fld.data), k
            if v.type == gguf.GGUFValueType.STRING:
                want = [bytes(fld.parts[i]) for i in fld.data]
                s = f.strings(k)
                assert [s.raw(i) for i in range(len(s))] == want, k
                assert s.tolist() == [w.decode("utf-8", "replace") for w in want], k
            else:
                want = np.array([fld.parts[i][0] for i in fld.data])
                got = f.array(k)
                assert got.dtype == want.dtype and np.array_equal(got, want), k
        elif isinstance(v, float):
            assert v == pytest.approx(fld.contents(), rel=1e-7), k
        else:
            assert v == fld.contents(), k
    assert len(h.tensors) == len(r.tensors) == len(f.tensors)
    for t in r.tensors:
        mine = h.tensors[t.name]
        assert (mine.qtype, mine.ne, mine.n_bytes, mine.offset) == \
            (t.tensor_type, tuple(int(x) for x in t.shape), int(t.n_bytes), int(t.data_offset)), t.name
        assert f.tensors[t.name] == mine
        want = np.asarray(t.data).view(np.uint8).reshape(-1)
        assert np.array_equal(f.tensor_array(t.name), want), t.name
        assert np.array_equal(f.tensor_data(t.name).numpy(), want), t.name
        buf = bytearray(mine.n_bytes)
        f.read_into(t.name, memoryview(buf))
        assert bytes(buf) == want.tobytes(), t.name
    assert hparams_from_gguf(h) == hparams_from_gguf(f)
    return h


def test_tiny_model_header_equals_gguf_reader(tiny_path):
    h = _same_as_gguf_reader(tiny_path)
    assert h.arch == "llama" and h.version == 3


def test_tiny_gemma3_equals_gguf_reader(tmp_path):
    from tiny_gemma3 import write_tiny_gemma3

    _same_as_gguf_reader(write_tiny_gemma3(tmp_path / "g.gguf"))


@pytest.mark.slow
def test_smollm2_header_equals_gguf_reader(smollm2_path):
    h = _same_as_gguf_reader(smollm2_path)
    assert isinstance(h.get("tokenizer.ggml.tokens"), ArrayRef) and len(h.get("tokenizer.ggml.tokens")) == 49152


@pytest.mark.slow
def test_gemma3_header_equals_gguf_reader(gemma3_path):
    _same_as_gguf_reader(gemma3_path)


def test_header_is_fast(smollm2_path):
    """Work counted, not timed (tests/work_count.py): per key and tensor a bounded number of
    calls, per vocabulary string one C call at most (gguf.GGUFReader: ~3.5 s on this file)."""
    from work_count import header_work

    n_py, n_c, entries, strings = header_work(smollm2_path)
    assert strings > 90000  # SmolLM2's tokens and merges: the walk's per-element bound means something
    assert n_py < 40 * entries and n_c < strings + 40 * entries, (n_py, n_c, entries, strings)
    h = GGUFHeader(smollm2_path)
    assert h.header_bytes < h.file_size() // 10


def test_tensor_views_share_the_map_and_outlive_the_file(tiny_path):
    f = GGUFFile(tiny_path)
    name = next(iter(f.tensors))
    t = f.tensor_data(name)
    assert t.is_contiguous() and t.numel() == f.tensors[name].n_bytes
    want = t.clone()
    del f
    import gc

    gc.collect()
    assert (t == want).all()  # the map lives as long as the tensor


def test_metadata_hash_ignores_tensor_data(tmp_path, tiny_path):
    data = bytearray(tiny_path.read_bytes())
    a = GGUFFile(tiny_path)
    data[-1] ^= 0xFF  # the last byte of the last tensor
    p = tmp_path / "b.gguf"
    p.write_bytes(data)
    assert GGUFFile(p).metadata_sha256() == a.metadata_sha256()
    data[a.kv_end - 1] ^= 0xFF  # the last byte of the last metadata value
    p.write_bytes(data)
    assert GGUFFile(p).metadata_sha256() != a.metadata_sha256()


def test_cached_pages_and_read_ahead(tmp_path, tiny_path):
    """An evicted copy probes cold where RWF_NOWAIT exists (None only where it does not); once
    read_ahead has read it, every sampled page is cached."""
    from page_cache import CAN_PROBE, cold_copy

    f = cold_copy(tiny_path, tmp_path / "cold.gguf")
    cold = f.cached_pages()
    assert (cold is not None and cold[0] <= cold[1] // 4) if CAN_PROBE else cold is None, cold
    assert f.read_ahead() == f.file_size() - f.data_offset
    probe = f.cached_pages()
    assert probe == (cold[1], cold[1]) if CAN_PROBE else probe is None  # just read: every sampled page is cached
    seen = []
    assert f.read_ahead(seen.append) == f.file_size() - f.data_offset
    assert seen and seen[-1] == 1.0


def _write(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _kv_header(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def _key(k: str) -> bytes:
    return struct.pack("<Q", len(k)) + k.encode()


@pytest.mark.parametrize("cls", [GGUFHeader, GGUFFile])
def test_rejects_non_gguf_and_truncated(tmp_path, tiny_path, cls):
    with pytest.raises(ValueError, match="not a valid GGUF file"):
        cls(_write(tmp_path, "x.gguf", b"GGML" + bytes(100)))
    with pytest.raises(ValueError, match="not a valid GGUF file"):
        cls(_write(tmp_path, "empty.gguf", b""))
    with pytest.raises(ValueError, match="truncated|runs past|only 184 remain at byte 8"):
        cls(_write(tmp_path, "cut.gguf", tiny_path.read_bytes()[:200]))
    with pytest.raises(ValueError, match=r"runs past the end of the file .*truncated download"):
        cls(_write(tmp_path, "cut2.gguf", tiny_path.read_bytes()[:-10]))  # tensor data cut short
    with pytest.raises(FileNotFoundError):
        cls(tmp_path / "missing.gguf")


@pytest.mark.parametrize("cls", [GGUFHeader, GGUFFile])
def test_absurd_counts_and_lengths_name_the_offset(tmp_path, cls):
    bad = {
        "n_kv": (_kv_header(0, 1 << 60), r"metadata key count 1152921504606846976 .* at byte 16"),
        "n_tensors": (_kv_header(1 << 40, 0), r"tensor count 1099511627776 .* at byte 8"),
        "key length": (_kv_header(0, 1) + struct.pack("<Q", 1 << 50) + bytes(40),
                       r"string of \d+ bytes runs past .* at byte 24"),
        "value type": (_kv_header(0, 1) + _key("k") + struct.pack("<I", 99), r"unknown GGUF value type 99 at byte 33"),
        "array count": (_kv_header(0, 1) + _key("k") + struct.pack("<IIQ", 9, 6, 1 << 40),
                        r"FLOAT32 array count 1099511627776 .* at byte 41"),
        "string in array": (_kv_header(0, 1) + _key("k") + struct.pack("<IIQ", 9, 8, 100)
                            + struct.pack("<Q", 1) + b"a" + struct.pack("<Q", 1 << 40) + bytes(800),
                            r"string 1 of 100 .* runs past the end of the file at byte 58"),
        "n_dims": (_kv_header(1, 0) + _key("t") + struct.pack("<I", 7) + bytes(40),
                   r"tensor 't' has 7 dimensions \(at most 4\) at byte 24"),
        "ggml type": (_kv_header(1, 0) + _key("t") + struct.pack("<IQI", 1, 32, 1234) + bytes(40),
                      r"tensor 't' has unknown ggml type 1234 at byte 45"),
    }
    for name, (data, msg) in bad.items():
        with pytest.raises(ValueError, match=msg):
            cls(_write(tmp_path, f"{name}.gguf", data))
