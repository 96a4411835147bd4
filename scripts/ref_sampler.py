"""Reference draws of llama.cpp's sampler chain for tests/test_sampler_llamacpp.py.

Compiles ref_sampler.cpp against llama.cpp's libllama (its build/bin), runs the chain
top_k -> top_p -> min_p -> temp -> dist(seed) over fixed logits rows and writes every case
(its settings, logits and the tokens llama.cpp drew, in order) to tests/data/sampler_ref.json.

    python scripts/ref_sampler.py /root/.cache/llamacpp-ref/llama.cpp/build/bin
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "sampler_ref.json"


def cases() -> list[dict]:
    rs = np.random.RandomState(20261205)
    row = lambda n, scale: [round(float(v), 3) for v in rs.standard_normal(n) * scale]  # noqa: E731
    # no exact ties: llama.cpp orders equal logits by std::partial_sort, which is not stable
    # (an order the standard leaves to the library); llamapy keeps equal logits in id order
    return [
        dict(seed=42, top_k=40, top_p=0.95, min_p=0.05, temp=0.8, n_draws=64, logits=row(600, 2.0)),
        dict(seed=1234, top_k=0, top_p=1.0, min_p=0.0, temp=1.0, n_draws=64, logits=row(300, 1.0)),
        dict(seed=7, top_k=5, top_p=1.0, min_p=0.0, temp=1.5, n_draws=64, logits=row(200, 1.5)),
        dict(seed=0, top_k=0, top_p=0.9, min_p=0.0, temp=0.7, n_draws=64, logits=row(2000, 3.0)),
        dict(seed=4294967294, top_k=40, top_p=0.95, min_p=0.1, temp=1.2, n_draws=64, logits=row(64, 0.3)),
    ]


def main(bin_dir: Path) -> None:
    src = bin_dir.parent.parent  # llama.cpp/build/bin -> llama.cpp
    cs = cases()
    with tempfile.TemporaryDirectory() as d:
        exe = Path(d) / "ref-sampler"
        subprocess.run(["g++", "-O1", "-std=c++17", f"-I{src / 'include'}", f"-I{src / 'ggml/include'}",
                        str(Path(__file__).with_name("ref_sampler.cpp")), f"-L{bin_dir}", "-lllama",
                        f"-Wl,-rpath,{bin_dir}", "-o", str(exe)], check=True)
        lines = [" ".join(map(str, [c["seed"], c["top_k"], c["top_p"], c["min_p"], c["temp"], c["n_draws"],
                                    len(c["logits"]), *c["logits"]])) for c in cs]
        inp = Path(d) / "cases.txt"
        inp.write_text("\n".join(lines) + "\n")
        out = subprocess.run([str(exe), str(inp)], capture_output=True, text=True, check=True).stdout
    for c, line in zip(cs, out.strip().split("\n"), strict=True):
        c["tokens"] = [int(t) for t in line.split()]
    OUT.write_text(json.dumps({"source": "llama.cpp libllama via scripts/ref_sampler.py", "cases": cs}) + "\n")
    print(f"wrote {OUT} ({len(cs)} cases)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
