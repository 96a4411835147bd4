"""`llamapy info -m FILE`: the file described from its header and tensor infos alone (a file
whose tensor data is garbage, or cut short, is described the same), and the verdict equal, word
for word, to the refusal Model.load gives (an unsupported architecture, a key it does not
implement, a ggml type it cannot read, a truncated file)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from llamapy import Model
from llamapy.cli.main import main
from llamapy.gguf.header import GGUFError, GGUFHeader
from tiny_family import F16, Q8_0, write_tiny_family


def info(capsys, path: Path, *flags: str) -> str:
    assert main(["info", "-m", str(path), *flags]) == 0
    return capsys.readouterr().out


def info_json(capsys, path: Path) -> dict:
    return json.loads(info(capsys, path, "--json"))


def load_error(path: Path) -> str:
    with pytest.raises(GGUFError) as e:
        Model.load(path, exact=True)
    return str(e.value)


def test_moe_file_described(tmp_path, capsys):
    path = write_tiny_family(tmp_path / "m.gguf", "qwen3moe", Q8_0, n_layer=3, n_expert=8, n_expert_used=2)
    out = info(capsys, path)
    assert "architecture: qwen3moe" in out
    assert "layers: 3, n_embd 64, n_ff 128, heads 4 (kv 2)" in out
    assert "experts: 8, 2 used per token, expert n_ff 64" in out
    assert "context length: 4096" in out
    assert "vocabulary: 264 tokens, tokenizer.ggml.model 'gpt2'" in out
    assert out.rstrip().endswith("llamapy runs it: yes")
    j = info_json(capsys, path)
    # 3 layers x (q, k, v, o, 3 expert stacks) + token_embd: Q8_0; norms, router: F32
    h = GGUFHeader(path)
    by_type = {c["type"]: (c["n_tensors"], c["n_bytes"]) for c in j["types"]}
    for name in ("Q8_0", "F32"):
        ts = [t for t in h.tensors.values() if t.qtype.name == name]
        assert by_type[name] == (len(ts), sum(t.n_bytes for t in ts))
    assert by_type["Q8_0"][0] == 3 * 7 + 1
    assert j["file_type"] == "Q8_0" and j["runs"] and j["refusal"] is None


def test_garbage_and_truncated_data(tmp_path, capsys):
    """Garbage in every byte of tensor data: the same description, and it runs (the data is
    not read).  The data cut short: the same description, and the loader's refusal."""
    path = write_tiny_family(tmp_path / "m.gguf", "qwen3", F16)
    whole = info_json(capsys, path)
    h = GGUFHeader(path)
    raw = bytearray(path.read_bytes())
    raw[h.data_offset:] = np.random.default_rng(1).integers(0, 256, len(raw) - h.data_offset, dtype=np.uint8).tobytes()
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(bytes(raw))
    g = info_json(capsys, garbage)
    assert {**g, "path": None} == {**whole, "path": None}
    short = tmp_path / "short.gguf"
    short.write_bytes(bytes(raw[: h.data_offset + 4096]))
    s = info_json(capsys, short)
    same = ("arch", "n_tensors", "types", "hparams", "vocab")
    assert {k: s[k] for k in same} == {k: whole[k] for k in same}
    assert not s["runs"] and "runs past the end of the file" in s["refusal"]
    assert s["refusal"] == load_error(short)
    assert "tensors' data lie past the end of the file" in s["notes"][0]


def test_refused_architecture(tmp_path, capsys):
    path = write_tiny_family(tmp_path / "m.gguf", "mamba", F16)
    out = info(capsys, path)
    assert "architecture: mamba" in out
    want = load_error(path)
    assert "unsupported model architecture 'mamba'" in want
    assert out.rstrip().endswith(f"llamapy runs it: no: {want}")


def test_refused_key(tmp_path, capsys):
    path = write_tiny_family(tmp_path / "m.gguf", "llama", F16, extra_keys={"rope.scaling.type": "yarn"})
    j = info_json(capsys, path)
    assert j["hparams"]["rope_scaling_type"] == "yarn"
    assert not j["runs"] and "rope.scaling.type" in j["refusal"]
    assert j["refusal"] == load_error(path)


def test_refused_type(tmp_path, capsys):
    """token_embd retyped F16 -> I8 in its tensor info (fewer bytes: the layout stays valid):
    a type the loader cannot read, named with the tensor."""
    path = write_tiny_family(tmp_path / "m.gguf", "qwen2", F16)
    h = GGUFHeader(path)
    t = h.tensors["token_embd.weight"]
    at = t.info_offset + 8 + len(t.name.encode()) + 4 + 8 * len(t.ne)
    raw = bytearray(path.read_bytes())
    assert struct.unpack_from("<I", raw, at)[0] == gguf.GGMLQuantizationType.F16
    struct.pack_into("<I", raw, at, gguf.GGMLQuantizationType.I8)
    path.write_bytes(bytes(raw))
    j = info_json(capsys, path)
    assert {c["type"] for c in j["types"]} == {"F16", "F32", "I8"}
    assert not j["runs"] and "'token_embd.weight'" in j["refusal"] and "I8" in j["refusal"]
    assert j["refusal"] == load_error(path)


MXFP4 = gguf.GGMLQuantizationType.MXFP4
FAMILIES = {  # case -> (arch, weight type, writer kwargs, general.file_type's name, experts line or None)
    "qwen2": ("qwen2", F16, {}, "F16", None),
    "qwen3": ("qwen3", Q8_0, {}, "Q8_0", None),
    "qwen3moe": ("qwen3moe", Q8_0, {}, "Q8_0", "experts: 8, 2 used per token, expert n_ff 64"),
    "llama3": ("llama", F16, {}, "F16", None),
    "mixtral": ("llama", Q8_0, {"n_expert": 8}, "Q8_0", "experts: 8, 2 used per token"),
    "phi3": ("phi3", F16, {}, "F16", None),
    "gemma2": ("gemma2", F16, {}, "F16", None),
    "gpt-oss": ("gpt-oss", MXFP4, {}, "MXFP4 MoE", "experts: 4, 2 used per token, expert n_ff 64"),
}


@pytest.mark.parametrize("case", list(FAMILIES))
def test_each_family_file_described(tmp_path, capsys, case):
    """Issue 43's families: info names the architecture, general.file_type as llama.cpp does,
    each ggml type's tensor count as the header holds it, the experts (MoE only) and 'runs it:
    yes', which Model.load agrees with."""
    arch, wtype, kw, ftype, experts = FAMILIES[case]
    path = write_tiny_family(tmp_path / f"{case}.gguf", arch, wtype, **kw)
    out = info(capsys, path)
    h = GGUFHeader(path)
    assert f"architecture: {arch}\n" in out
    assert f"file type: {ftype}; {len(h.tensors)} tensors" in out
    for t in {t.qtype.name for t in h.tensors.values()}:
        n = sum(1 for x in h.tensors.values() if x.qtype.name == t)
        assert f"    {t:<8} {n:6d} tensors" in out, (t, out)
    assert (experts or "experts: none (dense FFN)") in out
    assert out.rstrip().endswith("llamapy runs it: yes")
    j = info_json(capsys, path)
    assert j["arch"] == arch and j["file_type"] == ftype and j["runs"] and j["refusal"] is None
    Model.load(path, exact=True)  # the verdict holds
