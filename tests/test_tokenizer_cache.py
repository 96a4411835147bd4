"""tokenizer/cache.py: the derived vocabulary tables are used when the cache is valid, rebuilt
when the GGUF's metadata or llamapy changes, and a corrupted cache file is rebuilt, never
trusted; a cached build tokenizes exactly as a fresh one."""
from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import numpy as np
import pytest

import llamapy.tokenizer.cache as tc
from llamapy.gguf.reader import GGUFFile
from llamapy.tokenizer import Tokenizer
from test_tokenizer import _ref, _write_toy_gguf
from test_tokenizer_small import _write_bpe_gguf

TEXTS = ["Hello world", "  indented\n\tlines 123 4567", "élan ☃ 日本語 😀", "<|im_start|>user hi<|im_end|>", ""]


def _toy_spm(path: Path) -> Path:
    data = _ref("toy_spm")
    return _write_toy_gguf(path, data["toy"], "toy spm", None)


@contextlib.contextmanager
def _warnings():
    """The llama_vocab logger's warnings (its own handler and level: CLI tests run in-process
    turn propagation off, and `bench` raises the llamapy logger to ERROR)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    log = logging.getLogger("llamapy.llama_vocab")
    h, level = Keep(logging.WARNING), log.level
    log.addHandler(h)
    log.setLevel(logging.WARNING)
    try:
        yield lines
    finally:
        log.removeHandler(h)
        log.setLevel(level)


def _ids(tok: Tokenizer) -> list[list[int]]:
    return [tok.tokenize(t, parse_special=True) for t in TEXTS]


@pytest.fixture(params=["bpe", "spm"])
def gguf_path(request, tmp_path) -> Path:
    if request.param == "bpe":
        return _write_bpe_gguf(tmp_path / "bpe.gguf")
    return _toy_spm(tmp_path / "spm.gguf")


def test_built_once_then_loaded(gguf_path, tmp_path):
    folder = tmp_path / "cache"
    fresh = Tokenizer.from_gguf(gguf_path, cache=folder)
    assert fresh.cache_status == "built"
    (entry,) = folder.iterdir()
    assert entry == tc.cache_path(GGUFFile(gguf_path), folder)
    again = Tokenizer.from_gguf(gguf_path, cache=folder)
    assert again.cache_status == "loaded"
    assert _ids(again) == _ids(fresh)
    assert again.hf.to_str() == fresh.hf.to_str()
    assert again.spell == fresh.spell


def test_rebuilt_when_llamapy_changes(gguf_path, tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    Tokenizer.from_gguf(gguf_path, cache=folder)
    monkeypatch.setattr(tc, "_code_version", lambda: "format 999; llamapy 9.9.9")
    tok = Tokenizer.from_gguf(gguf_path, cache=folder)
    assert tok.cache_status == "built"
    assert len(list(folder.iterdir())) == 1  # the same entry, rebuilt in place
    assert Tokenizer.from_gguf(gguf_path, cache=folder).cache_status == "loaded"


def test_rebuilt_when_the_file_changes(tmp_path):
    folder = tmp_path / "cache"
    a = _write_bpe_gguf(tmp_path / "a.gguf")
    assert Tokenizer.from_gguf(a, cache=folder).cache_status == "built"
    b = _write_bpe_gguf(tmp_path / "a.gguf", template="{{ messages }}")  # same path, other metadata
    tok = Tokenizer.from_gguf(b, cache=folder)
    assert tok.cache_status == "built"
    assert tok.vocab.chat_template == "{{ messages }}"
    assert len(list(folder.iterdir())) == 2


def _corruptions(blob: bytes) -> dict[str, bytes]:
    payload_at = len(tc.MAGIC) + 130
    flipped = bytearray(blob)
    flipped[-3] ^= 0x40
    return {"flipped byte": bytes(flipped), "truncated": blob[:-5], "empty": b"", "garbage": b"\x00" * 300,
            "other magic": b"X" + blob[1:], "header only": blob[:payload_at]}


@pytest.mark.parametrize("how", list(_corruptions(b"x" * 400)))
def test_corrupted_cache_is_rebuilt(gguf_path, tmp_path, how):
    folder = tmp_path / "cache"
    want = _ids(Tokenizer.from_gguf(gguf_path, cache=folder))
    path = tc.cache_path(GGUFFile(gguf_path), folder)
    path.write_bytes(_corruptions(path.read_bytes())[how])
    with _warnings() as lines:
        tok = Tokenizer.from_gguf(gguf_path, cache=folder)
    assert tok.cache_status == "built"
    assert any("not usable" in ln and "rebuilding" in ln for ln in lines), lines
    assert _ids(tok) == want
    assert Tokenizer.from_gguf(gguf_path, cache=folder).cache_status == "loaded"


def test_ids_out_of_range_with_a_valid_checksum_are_not_trusted(tmp_path):
    p = _write_bpe_gguf(tmp_path / "t.gguf")
    f, folder = GGUFFile(p), tmp_path / "cache"
    n_vocab = len(f.strings("tokenizer.ggml.tokens"))
    tc.write_tables(tc.cache_path(f, folder), tc.cache_key(f), tc.VocabTables(np.array([[0, n_vocab + 5]], dtype=np.int32), []))
    with pytest.raises(tc.CacheInvalid, match="merge ids outside"):
        tc.read_tables(tc.cache_path(f, folder), tc.cache_key(f), n_vocab)
    assert Tokenizer.from_gguf(p, cache=folder).cache_status == "built"


def test_small_vocabularies_are_not_cached_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAPY_TOKENIZER_CACHE", str(tmp_path / "cache"))
    tok = Tokenizer.from_gguf(_write_bpe_gguf(tmp_path / "t.gguf"))
    assert tok.cache_status == "uncached" and not (tmp_path / "cache").exists()


def test_unwritable_cache_is_a_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with _warnings() as lines:
        tok = Tokenizer.from_gguf(_write_bpe_gguf(tmp_path / "t.gguf"), cache=blocker / "cache")
    assert tok.cache_status == "uncached" and any("could not write the tokenizer cache" in ln for ln in lines)
    assert tok.tokenize("Hello world") == Tokenizer.from_gguf(tmp_path / "t.gguf", cache=tmp_path / "c").tokenize("Hello world")


def test_cache_file_layout(tmp_path):
    p = _toy_spm(tmp_path / "spm.gguf")
    folder = tmp_path / "cache"
    Tokenizer.from_gguf(p, cache=folder)
    blob = tc.cache_path(GGUFFile(p), folder).read_bytes()
    assert blob.startswith(tc.MAGIC)
    meta = json.loads(blob[len(tc.MAGIC) + 130 :].split(b"\n", 1)[0])
    assert set(meta) == {"n_merges", "phantoms"} and meta["n_merges"] > 0


@pytest.mark.parametrize("which", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)])
def test_real_vocabularies_cached_and_loaded_agree(which, smollm2_path, gemma3_path, tmp_path):
    path = smollm2_path if which == "smollm2" else gemma3_path
    fresh = Tokenizer.from_gguf(path, cache=tmp_path)
    again = Tokenizer.from_gguf(path, cache=tmp_path)
    assert (fresh.cache_status, again.cache_status) == ("built", "loaded")
    ref = _ref(which)
    for e in ref["entries"]:
        assert again.tokenize(e["text"], add_special=e["add_special"], parse_special=e["parse_special"]) == e["ids"], e["name"]
