#!/usr/bin/env python3
"""Reference output of llama-quantize for tests/test_quantize_iq.py and tests/test_quantize_k.py.

For each case writes a tiny F32 GGUF with tests/tiny_model.py / tests/tiny_family.py (fixed seed:
the test writes the same file and checks its tensors' sha256 against `input_sha256`), runs
`llama-quantize FILE OUT TYPE` (no imatrix) and writes tests/data/quantize_ref/CASE.json:
{"type", "llama_quantize": its build line, "input_sha256", "tensors": {name: ggml type name},
"sha256": {name: sha256 of its bytes}} and, for the cases with "bytes", CASE.npz: each tensor of
the asked type's raw bytes.

Cases: iq4_nl / iq4_xs (llama, n_embd 256, GQA 4: attn_v goes Q5_K, output Q6_K), iq4_xs_rules
(8 layers of 64 columns: IQ4_XS -> IQ4_NL fallback, ffn_down of layer 0 Q5_K, output Q8_0),
iq4_nl_mixtral (llama with 8 experts: attn_k/v Q8_0, attn_output Q5_K), mxfp4_moe (qwen3moe:
experts MXFP4, the rest Q8_0, the router kept F32), the K mixes q4_k_s, q4_k_m, q5_k_s, q5_k_m
(llama, 8 layers of 256 columns, GQA 4: use_more_bits' Q6_K attn_v / ffn_down, Q4_K_S's Q5_K
ones) and q4_k_m_moe, q5_k_m_moe (qwen3moe, 8 experts of 256: expert stacks Q4_K / Q5_K / Q6_K,
attn_v / attn_k Q8_0, attn_output Q5_K in Q4_K_M); q4_k_s_edge, q5_k_m_edge: 2 layers whose
matrices' rows are edge cases (edge_rows: all zero, constant, a zero sub-block, sub-block scales
from 1e-7 to 1, all positive, outliers, 1e-9, a coarse grid, all negative, constant 16-groups).

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
    **{k: ("llama", dict(n_embd=256, n_layer=8, n_head=8, n_head_kv=2, n_ff=256), k.upper(), False)
       for k in ("q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m")},
    **{f"{k}_moe": ("family", dict(arch="qwen3moe", n_embd=256, n_layer=1, n_head=8, n_ff_exp=256), k.upper(), False)
       for k in ("q4_k_m", "q5_k_m")},
    **{f"{k}_edge": ("llama", dict(n_embd=256, n_layer=2, n_head=8, n_head_kv=2, n_ff=256), k.upper(), False)
       for k in ("q4_k_s", "q5_k_m")},
}


def edge_rows(path: Path) -> None:
    """Rewrite every blk.* matrix of path in place, row i as edge case i % 10 (fixed seed)."""
    r = gguf.GGUFReader(path, "r+")
    rng = np.random.default_rng(7)
    for t in r.tensors:
        if not t.name.startswith("blk.") or len(t.data.shape) != 2:
            continue
        rows = t.data.reshape(-1, t.data.shape[-1])
        for i in range(rows.shape[0]):
            row = rng.standard_normal(rows.shape[1]).astype(np.float32)
            k = i % 10
            if k == 0:
                row[:] = 0
            elif k == 1:
                row[:] = 0.5
            elif k == 2:
                row[32:64] = 0
            elif k == 3:
                row *= np.repeat(10.0 ** rng.uniform(-7, 0, row.size // 32), 32).astype(np.float32)
            elif k == 4:
                row = np.abs(row) + np.float32(0.1)
            elif k == 5:
                row[rng.integers(0, row.size, 3)] *= 50
            elif k == 6:
                row *= np.float32(1e-9)
            elif k == 7:
                row = (np.round(row * 4) / 4).astype(np.float32)
            elif k == 8:
                row = -np.abs(row)
            else:
                row = np.repeat(rng.standard_normal(row.size // 16), 16).astype(np.float32)
            rows[i] = row
    r.data.flush()


def write_input(case: str, path: Path) -> Path:
    """The case's F32 input GGUF (also used by the test)."""
    sys.path.insert(0, str(ROOT / "tests"))
    writer, kw, _, _ = CASES[case]
    if writer == "llama":
        from tiny_model import write_tiny_llama

        write_tiny_llama(path, **kw)
        if case.endswith("_edge"):
            edge_rows(path)
        return path
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
                   "tensors": types, "sha256": {t.name: hashlib.sha256(np.ascontiguousarray(t.data).tobytes()).hexdigest()
                                                for t in r.tensors}}
            (OUT / f"{case}.json").write_text(json.dumps(ref, indent=1) + "\n")
            if keep:
                want = gguf.GGMLQuantizationType[qtype.removesuffix("_MOE")]  # (the IQ4 / MXFP4 cases)
                np.savez_compressed(OUT / f"{case}.npz", **{t.name: np.ascontiguousarray(t.data).view(np.uint8)
                                                           for t in r.tensors if t.tensor_type == want})
            print(case, {k: list(types.values()).count(k) for k in set(types.values())})


if __name__ == "__main__":
    main()
