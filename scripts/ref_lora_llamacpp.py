"""Reference log-probabilities from llama.cpp with LoRA adapters, for tests/test_lora.py.

Writes the tiny base model (tests/tiny_family.py: llama, F16, untied output) and two tiny
adapters (tests/tiny_lora.py, convert_lora_to_gguf.py's layout; fixed seeds: the test writes
the same bytes again and checks their sha256 against the ones recorded here), then for each
case runs

    llama-perplexity -m BASE -f TEXT -c 64 -b 64 --chunks 4 -t 2 LORA-FLAGS --kl-divergence-base OUT

(as scripts/ref_logits_llamacpp.py, whose text and layout it shares) and writes
tests/data/ref_lora/CASE.kld and CASE.json (the flags, the files' sha256, llama.cpp's version).

    PYTHONPATH=src python scripts/ref_lora_llamacpp.py [--bin DIR] [--out DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ref_logits_llamacpp import BIN, N_CHUNKS, N_CTX, kld_base, text_file, version  # noqa: E402

BASE = {"arch": "llama", "weight_type": "F16", "tied": False}  # tiny_family.write_tiny_family's arguments
ADAPTERS = {  # tiny_lora.write_tiny_lora's arguments
    "a": {"rank": 4, "alpha": 8.0, "seed": 1},
    "b": {"rank": 8, "alpha": 0.0, "seed": 2, "targets": ["attn_q", "attn_v", "ffn_down"], "output": False, "std": 0.15},
}
CASES: dict[str, list[tuple[str, float]]] = {  # case -> (adapter, scale): --lora for 1.0, else --lora-scaled
    "lora-a": [("a", 1.0)],
    "lora-a-0.5": [("a", 0.5)],
    "lora-a-b": [("a", 0.7), ("b", -1.5)],
}


def write_files(tmp: Path) -> tuple[Path, dict[str, Path], dict[str, str]]:
    """The base and the adapters in tmp; (base, adapter paths, sha256 by file: 'base', 'a', 'b')."""
    sys.path.insert(0, str(ROOT / "tests"))
    import gguf
    from tiny_family import write_tiny_family
    from tiny_lora import write_tiny_lora

    base = write_tiny_family(tmp / "base.gguf", **{**BASE, "weight_type": gguf.GGMLQuantizationType[BASE["weight_type"]]})
    paths = {k: write_tiny_lora(tmp / f"lora-{k}.gguf", base, **{**kw, **({"targets": tuple(kw["targets"])} if "targets" in kw else {})})
             for k, kw in ADAPTERS.items()}
    sha = {k: hashlib.sha256(p.read_bytes()).hexdigest() for k, p in {"base": base, **paths}.items()}
    return base, paths, sha


def lora_flags(case: list[tuple[str, float]], paths: dict[str, Path]) -> list[str]:
    out: list[str] = []
    for k, s in case:
        out += ["--lora", str(paths[k])] if s == 1.0 else ["--lora-scaled", f"{paths[k]}:{s}"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", type=Path, default=BIN)
    ap.add_argument("--out", type=Path, default=ROOT / "tests/data/ref_lora")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    ver = version(a.bin)
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        text = text_file(tmp)
        base, paths, sha = write_files(tmp)
        for name, case in CASES.items():
            out = a.out / f"{name}.kld"
            flags, ppl = kld_base(a.bin, base, text, lora_flags(case, paths), out)
            shown = " ".join(lora_flags(case, {k: Path(f"LORA-{k.upper()}.gguf") for k in paths}))
            meta = {"case": name, "base": BASE, "adapters": ADAPTERS, "loras": case, "sha256": sha,
                    "n_ctx": N_CTX, "n_chunks": N_CHUNKS,
                    "command": f"llama-perplexity -m BASE.gguf -f TEXT {' '.join(flags)} {shown} --kl-divergence-base CASE.kld",
                    "text": f"tests/data/prose_en.txt, its first {4 * N_CTX * N_CHUNKS} characters",
                    "llama_cpp": ver, "final_estimate": ppl}
            (a.out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
            print(f"{name}: {out} ({out.stat().st_size} bytes), {meta['final_estimate']}")


if __name__ == "__main__":
    main()
