"""llama.cpp's accuracy on a test's check against transformers, for its bound: the same 1,100
tokens of prose decoded by llama.cpp in 512-row ubatches (ref_logits_all.cpp against its native
and its AVX2 build), each compared with transformers' float32 forward of the same GGUF: top-1
agreement (all rows, rows after the 512-token window), max |diff| of the logits, and of each row's
largest |diff| the 99th percentile and the mean (the largest alone is one draw of a heavy tail).
gemma3-270m (Q4_K_M): tests/test_gemma3.py's check, writes tests/data/gemma3_llamacpp_accuracy.json;
smollm2-135m (Q4_1): tests/test_reference_logits.py's, writes tests/data/smollm2_llamacpp_accuracy.json.

    PYTHONPATH=src python scripts/ref_llamacpp_accuracy.py gemma3-270m|smollm2-135m [LLAMA_CPP_DIR]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import llamapy

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
N_TOKENS, N_UBATCH = 1100, 512
# model -> (its test's text files, tokenize's add_special, the JSON written)
CHECKS = {"gemma3-270m": (("prose_en.txt", "prose_en_2.txt"), None, "gemma3_llamacpp_accuracy.json"),
          "smollm2-135m": (("prose_en.txt",), True, "smollm2_llamacpp_accuracy.json")}


def llamacpp_logits(src: Path, build: str, model: Path, ids: list[int], n_vocab: int, d: Path) -> torch.Tensor:
    bin_dir = src / build / "bin"
    exe = d / f"ref-logits-{build}"
    subprocess.run(["g++", "-O1", "-std=c++17", f"-I{src / 'include'}", f"-I{src / 'ggml/include'}",
                    str(ROOT / "scripts" / "ref_logits_all.cpp"), f"-L{bin_dir}", "-lllama",
                    f"-Wl,-rpath,{bin_dir}", "-o", str(exe)], check=True)
    (d / "ids.txt").write_text(" ".join(map(str, ids)) + "\n")
    out = d / f"logits-{build}.f32"
    subprocess.run([str(exe), str(model), str(d / "ids.txt"), str(out), str(N_UBATCH)], check=True)
    return torch.from_numpy(np.fromfile(out, dtype=np.float32).reshape(len(ids), n_vocab))  # [n, n_vocab]


def main(name: str, src: Path) -> None:
    import transformers

    files, add_special, json_name = CHECKS[name]
    model_path = Path.home() / ".cache/llamapy/models" / name
    gguf = next(model_path.glob("*.gguf"))
    model = llamapy.Model.load(gguf)
    text = "".join((DATA / f).read_text() for f in files)
    ids = (model.tokenize(text) if add_special is None else model.tokenize(text, add_special=add_special))[:N_TOKENS]
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                            dtype=torch.float32)
    with torch.inference_mode():
        want = ref(torch.tensor([ids])).logits[0]  # [n, n_vocab]
    out: dict = {"model": gguf.name, "n_tokens": N_TOKENS, "n_ubatch": N_UBATCH,
                 "script": "scripts/ref_llamacpp_accuracy.py", "builds": {}}
    with tempfile.TemporaryDirectory() as d:
        for build in ("build", "build-avx2"):
            got = llamacpp_logits(src, build, gguf, ids, want.shape[1], Path(d))
            agree = (got.argmax(-1) == want.argmax(-1)).float()
            row_max = (got - want).abs().max(-1).values  # [n]
            out["builds"][build] = {"top1": round(agree.mean().item(), 4),
                                    "top1_after_window": round(agree[512:].mean().item(), 4),
                                    "max_abs": round(row_max.max().item(), 4),
                                    "row_max_p99": round(torch.quantile(row_max, 0.99).item(), 4),
                                    "row_max_mean": round(row_max.mean().item(), 4)}
            print(build, out["builds"][build])
    (DATA / json_name).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CHECKS:
        raise SystemExit(f"usage: ref_llamacpp_accuracy.py {'|'.join(CHECKS)} [LLAMA_CPP_DIR]")
    main(sys.argv[1], Path(sys.argv[2]) if len(sys.argv) > 2 else Path.home() / ".cache/llamacpp-ref/llama.cpp")
