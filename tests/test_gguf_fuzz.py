"""A malformed GGUF gives one GGUFError (a ValueError) naming the field and its byte offset,
never another exception, a hang or an allocation larger than the file (issue 15).

Hand-written cases with exact messages (fast), then fuzzing under a memory cap, each batch in
a subprocess whose RLIMIT_AS is its VmPeak + 1 GiB (tests/gguf_fuzz_worker.py): hypothesis
mutations of the tiny GGUF (header walk, hparams checks and Model.load) and of the first
2 MiB of the real SmolLM2 (header walk and hparams), an exhaustive sweep of every cut and
every inverted byte of the tiny header, and a coverage-guided atheris run over the header
walk (tests/fuzz_gguf_atheris.py).  LLAMAPY_FUZZ_SCALE multiplies the case counts and
LLAMAPY_FUZZ_SEED picks the hypothesis seed ("random": a fresh one); `make fuzz` runs them
longer."""
from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from llamapy.gguf.header import VT, GGUFError, GGUFHeader
from llamapy.model.hparams import hparams_from_gguf

TESTS = Path(__file__).parent
SCALE = float(os.environ.get("LLAMAPY_FUZZ_SCALE", "1"))
SEED = os.environ.get("LLAMAPY_FUZZ_SEED", "15")
TINY_EXAMPLES = int(4000 * SCALE)
SMOLLM2_EXAMPLES = int(1000 * SCALE)
ATHERIS_RUNS = int(20000 * SCALE)
MiB = 1 << 20


# --- helpers: where each field of a GGUF lies, and patching it ------------------------------
def _value_at(h: GGUFHeader, key: str) -> int:
    """File offset of the value of metadata `key`."""
    return h.fields[key].offset + 8 + len(key.encode()) + 4


def _tensor_at(h: GGUFHeader, name: str) -> dict[str, int]:
    """File offsets of a tensor info's fields."""
    t = h.tensors[name]
    nd = t.info_offset + 8 + len(name.encode())
    ne = nd + 4
    return {"n_dims": nd, **{f"ne{d}": ne + 8 * d for d in range(len(t.ne))},
            "type": ne + 8 * len(t.ne), "offset": ne + 8 * len(t.ne) + 4}


def _patch(data: bytes, at: int, fmt: str, value) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def _write(tmp_path: Path, data: bytes, name: str = "bad.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _error(tmp_path: Path, data: bytes, load: bool = False, name: str = "bad.gguf") -> str:
    """The GGUFError message of parsing (and hparams; with load, Model.load) the bytes."""
    p = _write(tmp_path, data, name)
    with pytest.raises(GGUFError) as e:
        if load:
            from llamapy.model.model import Model

            Model.load(p, device="cpu")
        else:
            hparams_from_gguf(GGUFHeader(p))
    assert isinstance(e.value, ValueError)  # the CLI prints it as one "error: ..." line
    return str(e.value)


@pytest.fixture(scope="module")
def tiny(tiny_path) -> tuple[bytes, GGUFHeader]:
    return tiny_path.read_bytes(), GGUFHeader(tiny_path)


# --- hand-written cases -------------------------------------------------------------------------
def test_smollm2_cut_at_1_mib_and_4_mib(tmp_path, smollm2_path):
    with smollm2_path.open("rb") as fh:
        head = fh.read(4 * MiB)
    msg = _error(tmp_path, head[:MiB], name="cut1.gguf")
    assert msg == (f"{tmp_path / 'cut1.gguf'}: metadata 'tokenizer.ggml.merges': string array count 48900 is larger "
                   "than the file could hold: it needs at least 391200 bytes, but only 88381 remain at byte 960187 "
                   "(file size 1048576 bytes)")
    msg = _error(tmp_path, head, load=True, name="cut4.gguf")  # Model.load: the same one error
    assert msg == (f"{tmp_path / 'cut4.gguf'}: tensor 'token_embd.weight' (info at byte 1769507): data at offset "
                   "1,785,664 + 30,081,024 bytes runs past the end of the file (4,194,304 bytes; truncated download?)")


@pytest.mark.parametrize("n", [(1 << 63) - 1, 1 << 63, (1 << 64) - 1])
def test_header_claiming_2_63_tensors(tmp_path, n):
    msg = _error(tmp_path, b"GGUF" + struct.pack("<IQQ", 3, n, 0) + bytes(64))
    assert re.search(rf"header: tensor count {n} is larger than the file could hold: it needs at least \d+ bytes, "
                     rf"but only 72 remain at byte 8 \(file size 88 bytes\)$", msg), msg


def test_huge_lengths_and_counts_in_the_tiny_file(tmp_path, tiny):
    data, h = tiny
    key = "tokenizer.ggml.tokens"
    at = h.fields[key].offset
    msg = _error(tmp_path, _patch(data, at, "<Q", (1 << 64) - 1))  # the key's own length
    assert f"metadata key {list(h.fields).index(key)} of {len(h.fields)}: key string of {(1 << 64) - 1} bytes runs " \
           f"past the end of the file at byte {at}" in msg
    count_at = _value_at(h, key) + 4
    msg = _error(tmp_path, _patch(data, count_at, "<Q", 1 << 62))
    assert f"metadata '{key}': string array count {1 << 62} is larger than the file could hold" in msg
    assert f"at byte {count_at} " in msg
    seventh = int(h.fields[key].value.item_offsets[7])  # the length of token 7
    msg = _error(tmp_path, _patch(data, seventh, "<Q", 1 << 40))
    assert f"metadata '{key}': string 7 of 264 ({1 << 40} bytes) runs past the end of the file at byte {seventh}" in msg
    ne_at = _tensor_at(h, "blk.1.ffn_up.weight")["ne1"]
    msg = _error(tmp_path, _patch(data, ne_at, "<Q", (1 << 64) - 1))
    assert "tensor 'blk.1.ffn_up.weight'" in msg and f"ne[1] = {(1 << 64) - 1:,} is larger than 2^63 - 1" in msg
    msg = _error(tmp_path, _patch(data, ne_at, "<Q", 1 << 62))
    assert "tensor 'blk.1.ffn_up.weight'" in msg and "more than 2^63 - 1" in msg


def test_unknown_and_unreadable_tensor_types(tmp_path, tiny):
    data, h = tiny
    at = _tensor_at(h, "blk.0.attn_q.weight")["type"]
    msg = _error(tmp_path, _patch(data, at, "<I", 99))
    assert msg.endswith(f"tensor 'blk.0.attn_q.weight' has unknown ggml type 99 at byte {at} "
                        f"(file size {len(data)} bytes)"), msg
    # a type gguf knows and llamapy does not read: I8 (block 1, 1 byte: the data still fits)
    info = h.tensors["output_norm.weight"]
    msg = _error(tmp_path, _patch(data, _tensor_at(h, "output_norm.weight")["type"], "<I", 24), load=True)
    assert f"tensor 'output_norm.weight' (info at byte {info.info_offset}) has ggml type I8, which llamapy " \
           "cannot read" in msg


def test_overlapping_and_misaligned_tensor_data(tmp_path, tiny):
    data, h = tiny
    q, k = h.tensors["blk.0.attn_q.weight"], h.tensors["blk.0.attn_k.weight"]
    rel_q = q.offset - h.data_offset
    msg = _error(tmp_path, _patch(data, _tensor_at(h, k.name)["offset"], "<Q", rel_q + 32))
    assert msg.endswith(f"tensor '{k.name}' (info at byte {k.info_offset}): data at offset {q.offset + 32:,} overlaps "
                        f"tensor '{q.name}' (data at offset {q.offset:,} + {q.n_bytes:,} bytes)"), msg
    msg = _error(tmp_path, _patch(data, _tensor_at(h, k.name)["offset"], "<Q", k.offset - h.data_offset + 4))
    assert f"tensor '{k.name}' (info at byte {k.info_offset}): data offset {k.offset - h.data_offset + 4:,} is not " \
           f"a multiple of general.alignment (32)" in msg


def test_missing_required_keys_are_named(tmp_path, tiny):
    data, h = tiny
    for key in ("llama.embedding_length", "llama.block_count", "llama.feed_forward_length", "tokenizer.ggml.model"):
        at = h.fields[key].offset + 8 + len(key) - 1
        msg = _error(tmp_path, _patch(data, at, "<c", b"X"), load=key == "llama.embedding_length")
        assert msg == f"bad.gguf: {key} is missing (a required key)", msg
    at = h.fields["tokenizer.ggml.tokens"].offset + 8 + len("tokenizer.ggml.tokens") - 1
    assert "tokenizer.ggml.tokens is missing" in _error(tmp_path, _patch(data, at, "<c", b"X"))


def test_vocabulary_size_disagreeing_with_the_embedding(tmp_path, tiny):
    data, h = tiny
    embd = h.tensors["token_embd.weight"]
    msg = _error(tmp_path, _patch(data, _tensor_at(h, "token_embd.weight")["ne1"], "<Q", 263), load=True)
    assert msg == (f"bad.gguf: vocabulary size 264 (tokenizer.ggml.tokens) disagrees with the embedding: tensor "
                   f"'token_embd.weight' (info at byte {embd.info_offset}) has ne [64, 263], expected [64, 264] = "
                   f"[n_embd, n_vocab]"), msg
    vs = h.fields["llama.vocab_size"]
    msg = _error(tmp_path, _patch(data, _value_at(h, "llama.vocab_size"), "<I", 300))
    assert msg == (f"bad.gguf: metadata 'llama.vocab_size' (key at byte {vs.offset}) = 300 disagrees with "
                   f"'tokenizer.ggml.tokens' (key at byte {h.fields['tokenizer.ggml.tokens'].offset}: 264 tokens)")


def test_block_weight_shapes_against_the_hyperparameters(tmp_path, tiny):
    data, h = tiny
    gate = h.tensors["blk.0.ffn_gate.weight"]
    msg = _error(tmp_path, _patch(data, _value_at(h, "llama.feed_forward_length"), "<I", 96), load=True)
    assert msg == (f"bad.gguf: tensor 'blk.0.ffn_gate.weight' (info at byte {gate.info_offset}) has ne [64, 128], "
                   f"expected [64, 96] = [n_embd, n_ff] from the hyperparameters")
    k = h.tensors["blk.0.attn_k.weight"]
    msg = _error(tmp_path, _patch(data, _value_at(h, "llama.attention.head_count_kv"), "<I", 1))
    assert msg == (f"bad.gguf: tensor 'blk.0.attn_k.weight' (info at byte {k.info_offset}) has ne [64, 32], "
                   f"expected [64, 16] = [n_embd, n_head_kv*k] from the hyperparameters")
    msg = _error(tmp_path, _patch(data, _value_at(h, "llama.attention.head_count_kv"), "<I", 3))
    assert "'llama.attention.head_count' (key at byte" in msg and "is not a multiple of" in msg
    msg = _error(tmp_path, _patch(data, _value_at(h, "llama.attention.head_count"), "<I", 0))
    assert msg == (f"bad.gguf: metadata 'llama.attention.head_count' (key at byte "
                   f"{h.fields['llama.attention.head_count'].offset}) = 0 is out of range (at least 1)")
    msg = _error(tmp_path, _patch(data, _value_at(h, "llama.block_count"), "<I", 1 << 31))
    assert "'llama.block_count' (key at byte" in msg and "is larger than the file's 20 tensors could hold" in msg


def test_wrong_value_types_and_nesting(tmp_path, tiny):
    data, h = tiny
    # llama.context_length's type UINT32 -> FLOAT32: a number where an integer is needed
    key = "llama.context_length"
    msg = _error(tmp_path, _patch(data, _value_at(h, key) - 4, "<I", int(VT.FLOAT32)))
    assert msg.startswith(f"bad.gguf: metadata '{key}' (key at byte {h.fields[key].offset}) = ") and \
        msg.endswith("(FLOAT32) is not an integer"), msg
    # an unknown value type
    msg = _error(tmp_path, _patch(data, _value_at(h, key) - 4, "<I", 13))
    assert msg.endswith(f"metadata '{key}': unknown GGUF value type 13 at byte {_value_at(h, key) - 4} "
                        f"(file size {len(data)} bytes)"), msg
    # arrays of arrays 9 deep
    nested = b"".join(struct.pack("<IQ", int(VT.ARRAY), 1) for _ in range(10)) + struct.pack("<IQ", int(VT.UINT8), 0)
    blob = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", int(VT.ARRAY))
    msg = _error(tmp_path, blob + nested)
    assert "metadata 'k': arrays nested more than 8 deep at byte" in msg
    # a key twice
    blob = b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + 2 * (struct.pack("<Q", 1) + b"k" + struct.pack("<IB", 0, 7))
    msg = _error(tmp_path, blob)
    assert msg.endswith("metadata key 'k' appears twice (first at byte 24) at byte 38 (file size 52 bytes)"), msg


def test_the_checks_keep_the_smollm2_header_fast(smollm2_path):
    """Every check included, the walk's work stays per key and tensor (counted, not timed:
    tests/work_count.py), with at most one C call per vocabulary string."""
    from work_count import header_work

    n_py, n_c, entries, strings = header_work(smollm2_path)
    assert n_py < 40 * entries and n_c < strings + 40 * entries, (n_py, n_c, entries, strings)


# --- fuzzing in subprocesses under RLIMIT_AS ---------------------------------------------------
def _worker(base: Path, out: Path, *args: str, timeout: float) -> dict:
    cmd = [sys.executable, str(TESTS / "gguf_fuzz_worker.py"), str(base), str(out), *args]
    if SEED != "random":
        cmd += ["--seed", SEED]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0 and out.is_file(), (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    report = json.loads(out.read_text())
    print(json.dumps({k: v for k, v in report.items() if k != "failure"}))
    return report


def _assert_clean(report: dict, at_least: int) -> None:
    f = report["failure"]
    assert f is None, f"seed {report['seed']}: {f['error']}\nmutation: {f['mutation']}\n{f['traceback']}"
    assert report["cases"] >= at_least, report


def test_memory_cap_turns_an_over_allocation_into_a_memory_error(tmp_path, tiny_path):
    r = _worker(tiny_path, tmp_path / "r.json", "--selftest-alloc-mib", "4096", timeout=120)
    assert r["selftest"] == "MemoryError" and r["rlimit_as"] > 0


@pytest.mark.slow
def test_every_cut_and_inverted_byte_of_the_tiny_header(tmp_path, tiny_path):
    r = _worker(tiny_path, tmp_path / "r.json", "--sweep", "--load", timeout=300)
    _assert_clean(r, 2 * GGUFHeader(tiny_path).data_offset)
    assert r["outcomes"]["parse"] > r["cases"] // 2, r


@pytest.mark.slow
def test_hypothesis_mutations_of_the_tiny_gguf_load_or_raise_gguf_error(tmp_path, tiny_path):
    r = _worker(tiny_path, tmp_path / "r.json", "--examples", str(TINY_EXAMPLES), "--load",
                timeout=120 + TINY_EXAMPLES / 20)
    _assert_clean(r, TINY_EXAMPLES)
    assert r["outcomes"].get("parse", 0) > TINY_EXAMPLES // 2 and r["outcomes"].get("ok", 0) > 0, r
    assert r["outcomes"].get("outside", 0) < TINY_EXAMPLES // 100, r


@pytest.mark.slow
def test_hypothesis_mutations_of_the_smollm2_header_raise_gguf_error(tmp_path, smollm2_path):
    r = _worker(smollm2_path, tmp_path / "r.json", "--examples", str(SMOLLM2_EXAMPLES), "--prefix", str(2 * MiB),
                timeout=120 + SMOLLM2_EXAMPLES / 10)
    _assert_clean(r, SMOLLM2_EXAMPLES)
    assert r["outcomes"] == {"parse": r["cases"]}, r  # 2 MiB never hold the tensors


@pytest.mark.slow
def test_atheris_coverage_guided_header_fuzzing(tmp_path):
    pytest.importorskip("atheris", reason="pip install atheris (the dev extra) to fuzz with it")
    script = str(TESTS / "fuzz_gguf_atheris.py")
    corpus, art = tmp_path / "corpus", tmp_path / "artifacts"
    art.mkdir()
    subprocess.run([sys.executable, script, "--make-corpus", str(corpus)], check=True, timeout=120)
    seconds = os.environ.get("LLAMAPY_FUZZ_ATHERIS_SECONDS")
    bound = f"-max_total_time={seconds}" if seconds else f"-atheris_runs={ATHERIS_RUNS}"
    # -rss_limit_mb=0: the script caps its own address space (RLIMIT_AS); libFuzzer's RSS check
    # reads ru_maxrss, which a child inherits from a large parent (pytest late in the suite)
    # and would report as an out-of-memory that never happened
    r = subprocess.run([sys.executable, script, str(corpus), bound, "-max_len=65536", "-timeout=60", "-rss_limit_mb=0",
                        *([f"-seed={SEED}"] if SEED != "random" else []),
                        f"-artifact_prefix={art}/", "-print_final_stats=1"],
                       capture_output=True, text=True, cwd=tmp_path,
                       timeout=120 + (int(seconds) if seconds else ATHERIS_RUNS / 200))
    tail = r.stderr[-4000:]
    assert r.returncode == 0 and not list(art.iterdir()), tail
    done = re.search(r"Done (\d+) (?:runs )?in (\d+) second", r.stderr)
    assert done and (seconds or int(done.group(1)) >= ATHERIS_RUNS), tail
    print(f"atheris: {done.group(1)} runs in {done.group(2)} s, no crash")
