#!/usr/bin/env python3
"""Reference output of llama-quantize for tests/test_quantize_iq.py.

For each case writes a tiny F32 GGUF with tests/tiny_model.py / tests/tiny_family.py (fixed seed:
the test writes the same file and checks its tensors' sha256 against `input_sha256`), runs
`llama-quantize FILE OUT TYPE` (no imatrix) and writes tests/data/quantize_ref/CASE.json:
{"type", "llama_quantize": its build line, "input_sha256", "tensors": {name: ggml type name}}
and, for the cases with "bytes", CASE.npz: each tensor of the asked type's raw bytes.

Cases: iq4_nl / iq4_xs (llama, n_embd 256, GQA 4: attn_v goes Q5_K, output Q6_K), iq4_xs_rules
(8 layers of 64 columns: IQ4_XS -> IQ4_NL fallback, ffn_down of layer 0 Q5_K, output Q8_0),
iq4_nl_mixtral (llama with 8 experts: attn_k/v Q8_0, attn_output Q5_K) and mxfp4_moe (qwen3moe:
experts MXFP4, the rest Q8_0, the router kept F32).

Usage: scripts/ref_quantize.py [--bin DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests/data/quantize_ref"
CASES = {  # name -> (writer, kwargs, llama-quantize type, keep bytes)
    "iq4_nl": ("llama", dict(n_embd=256, n_layer=1, n_head=8, n_head_kv=2, n_ff=256), "IQ4_NL", True),
    "iq4_xs": ("llama", dict(n_embd=256, n_layer=1, n_head=8, n_head_kv=2, n_ff=256), "IQ4_XS", True),
    "iq4_xs_rules": ("llama", dict(n_embd=64, n_layer=8, n_head=8, n_head_kv=2, n_ff=128), "IQ4_XS", False),
    "iq4_nl_mixtral": ("family", dict(arch="llama", n_expert=8, n_embd=64, n_layer=2), "IQ4_NL", False),
    "mxfp4_moe": ("family", dict(arch="qwen3moe", n_embd=64, n_layer=2), "MXFP4_MOE", True),
}


def write_input(case: str, path: Path) -> Path:
    """The case's F32 input GGUF (also used by the test)."""
    sys.path.insert(0, str(ROOT / "tests"))
    writer, kw, _, _ = CASES[case]
    if writer == "llama":
        from tiny_model import write_tiny_llama

        return write_tiny_llama(path, **kw)
    from tiny_family import write_tiny_family

    return write_tiny_family(path, weight_type=gguf.GGMLQuantizationType.F32, **kw)


def tensors_sha256(path: Path) -> str:
    h = hashlib.sha256()
    for t in gguf.GGUFReader(path).tensors:
        h.update(t.name.encode())
        h.update(np.ascontiguousarray(t.data).tobytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, default=Path("/root/.cache/llamacpp-ref/llama.cpp/build/bin"))
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case, (_, _, qtype, keep) in CASES.items():
            src = write_input(case, Path(tmp) / f"{case}-f32.gguf")
            dst = Path(tmp) / f"{case}.gguf"
            run = subprocess.run([str(a.bin / "llama-quantize"), str(src), str(dst), qtype],
                                 capture_output=True, text=True, check=True)
            build = next((ln for ln in (run.stdout + run.stderr).splitlines() if "build" in ln), "")
            r = gguf.GGUFReader(dst)
            types = {t.name: gguf.GGMLQuantizationType(t.tensor_type).name for t in r.tensors}
            ref = {"type": qtype, "llama_quantize": build.strip(), "input_sha256": tensors_sha256(src),
                   "tensors": types}
            (OUT / f"{case}.json").write_text(json.dumps(ref, indent=1) + "\n")
            if keep:
                want = gguf.GGMLQuantizationType[qtype.removesuffix("_MOE")]
                np.savez_compressed(OUT / f"{case}.npz", **{t.name: np.ascontiguousarray(t.data).view(np.uint8)
                                                           for t in r.tensors if t.tensor_type == want})
            print(case, {k: list(types.values()).count(k) for k in set(types.values())})


if __name__ == "__main__":
    main()
