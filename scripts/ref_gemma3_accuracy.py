"""llama.cpp's accuracy on tests/test_gemma3.py's check, for its bound: the same 1,100 tokens of
prose through gemma3-270m (Q4_K_M, the wheel's file) decoded by llama.cpp in 512-row ubatches
(ref_logits_all.cpp against its native and its AVX2 build), each compared with transformers'
float32 forward of the same GGUF: top-1 agreement (all rows, rows after the 512-token window)
and max |diff| of the logits.  Writes tests/data/gemma3_llamacpp_accuracy.json.

    PYTHONPATH=src python scripts/ref_gemma3_accuracy.py [LLAMA_CPP_DIR]
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


def main(src: Path) -> None:
    import transformers

    model_path = Path.home() / ".cache/llamapy/models/gemma3-270m"
    gguf = next(model_path.glob("*.gguf"))
    model = llamapy.Model.load(gguf)
    text = (DATA / "prose_en.txt").read_text() + (DATA / "prose_en_2.txt").read_text()
    ids = model.tokenize(text)[:N_TOKENS]
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                            dtype=torch.float32)
    with torch.inference_mode():
        want = ref(torch.tensor([ids])).logits[0]  # [n, n_vocab]
    out: dict = {"model": gguf.name, "n_tokens": N_TOKENS, "n_ubatch": N_UBATCH,
                 "script": "scripts/ref_gemma3_accuracy.py", "builds": {}}
    with tempfile.TemporaryDirectory() as d:
        for build in ("build", "build-avx2"):
            got = llamacpp_logits(src, build, gguf, ids, want.shape[1], Path(d))
            agree = (got.argmax(-1) == want.argmax(-1)).float()
            out["builds"][build] = {"top1": round(agree.mean().item(), 4),
                                    "top1_after_window": round(agree[512:].mean().item(), 4),
                                    "max_abs": round((got - want).abs().max().item(), 4)}
            print(build, out["builds"][build])
    (DATA / "gemma3_llamacpp_accuracy.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".cache/llamacpp-ref/llama.cpp")
