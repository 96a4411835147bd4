"""Reference logits from llama.cpp itself for the llama-family architectures (qwen3moe and llama with experts too), gemma2, phi3
and gpt-oss, for
tests/test_families.py.

For each case writes the tiny GGUF with tests/tiny_family.py (fixed seed: the test writes the
same bytes again and checks their sha256 against the one recorded here), then runs

    llama-perplexity -m FILE -f TEXT -c 64 -b 64 --chunks 4 -t 2 --kl-divergence-base OUT

which saves llama.cpp's log-probabilities of every scored token (the second half of each
64-token chunk: 4 x 31 rows of the 264-token vocabulary) and the chunks' tokens in its own
file format (llamapy's bench/kld.py reads it).  Writes tests/data/ref_logits/CASE.kld and
CASE.json (the writer's arguments, the file's sha256, the command, llama.cpp's version).

    PYTHONPATH=src python scripts/ref_logits_llamacpp.py [--bin DIR] [--out DIR] [CASE ...]

(llama.cpp's tools: /work/shared/tools/build-llamacpp.sh, or LLAMACPP_BIN / --bin.)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("LLAMACPP_BIN", Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin"))
TEXT = ROOT / "tests/data/prose_en.txt"
N_CTX, N_CHUNKS = 64, 4
# case -> tiny_family.write_tiny_family's arguments (weight_type by name)
CASES: dict[str, dict] = {
    "qwen2-f16": {"arch": "qwen2", "weight_type": "F16"},
    "qwen2-q8_0": {"arch": "qwen2", "weight_type": "Q8_0"},
    "qwen2-tied-f16": {"arch": "qwen2", "weight_type": "F16", "tied": True},
    "qwen3-f16": {"arch": "qwen3", "weight_type": "F16"},
    "qwen3-q8_0": {"arch": "qwen3", "weight_type": "Q8_0"},
    "llama-rope-freqs-f16": {"arch": "llama", "weight_type": "F16", "rope_freqs": True},
    "gemma2-f16": {"arch": "gemma2", "weight_type": "F16"},
    "gemma2-q8_0": {"arch": "gemma2", "weight_type": "Q8_0"},
    "phi3-f16": {"arch": "phi3", "weight_type": "F16"},
    "phi3-q8_0": {"arch": "phi3", "weight_type": "Q8_0"},
    # LongRoPE: -c 64 gives n_ctx_seq 256 (a multiple of 256): the long factors above an original
    # context of 128, the short ones at 256 (llama.cpp's test is n_ctx_seq > n_ctx_orig_yarn)
    "phi3-longrope-long-f16": {"arch": "phi3", "weight_type": "F16", "longrope": True,
                               "extra_keys": {"rope.scaling.original_context_length": 128,
                                              "rope.scaling.attn_factor": 1.2}},
    "phi3-longrope-short-f16": {"arch": "phi3", "weight_type": "F16", "longrope": True,
                                "extra_keys": {"rope.scaling.original_context_length": 256,
                                               "rope.scaling.attn_factor": 1.2}},
    "qwen3moe-f16": {"arch": "qwen3moe", "weight_type": "F16"},
    "qwen3moe-q8_0": {"arch": "qwen3moe", "weight_type": "Q8_0"},
    "llama-moe-f16": {"arch": "llama", "weight_type": "F16", "n_expert": 4},
    "llama-moe-q8_0": {"arch": "llama", "weight_type": "Q8_0", "n_expert": 4},
    "llama-iq4_nl": {"arch": "llama", "weight_type": "IQ4_NL"},
    "llama-mxfp4": {"arch": "llama", "weight_type": "MXFP4"},
    "llama-iq4_xs": {"arch": "llama", "weight_type": "IQ4_XS", "n_embd": 256, "n_ff": 512},  # rows of 256
    # tests/tiny_gptoss.py: sinks, YaRN, a 16-cell window on layer 0, 4 experts top-2; MXFP4: the experts.
    # Seed 2: seeds 0 and 1 have a router near-tie (the 2nd and 3rd experts' logits 0.004 apart) that
    # ggml's f16 rounding of the activations flips (their F32 files agree to a KLD of 2e-6)
    "gpt-oss-f32": {"arch": "gpt-oss", "weight_type": "F32", "seed": 2},
    "gpt-oss-f16": {"arch": "gpt-oss", "weight_type": "F16", "seed": 2},
    "gpt-oss-mxfp4": {"arch": "gpt-oss", "weight_type": "MXFP4", "seed": 2},
}


def write_case(path: Path, args: dict) -> str:
    """Write the case's GGUF to path; returns its sha256."""
    sys.path.insert(0, str(ROOT / "tests"))
    import gguf
    from tiny_family import write_tiny_family

    kw = {**args, "weight_type": gguf.GGMLQuantizationType[args["weight_type"]]}
    write_tiny_family(path, **kw)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def text_file(tmp: Path) -> Path:
    """Enough prose for N_CHUNKS chunks with room to spare (the byte vocabulary: ~1 token a
    character)."""
    p = tmp / "text.txt"
    p.write_text(TEXT.read_text()[: 4 * N_CTX * N_CHUNKS])
    return p


def version(bin_dir: Path) -> str:
    r = subprocess.run([str(bin_dir / "llama-perplexity"), "--version"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    return " ".join(line.strip() for line in r.stdout.splitlines() if line.startswith(("version", "built")))


def kld_base(bin_dir: Path, model: Path, text: Path, extra: list[str], out: Path) -> tuple[list[str], str]:
    """llama-perplexity -m model -f text FLAGS extra --kl-divergence-base out; returns FLAGS (the
    context, batch, chunks and threads every reference uses) and its final PPL estimate.
    RuntimeError with the output's tail when it fails or writes no file."""
    flags = ["-c", str(N_CTX), "-b", str(N_CTX), "--chunks", str(N_CHUNKS), "-t", "2"]
    cmd = [str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(text), *flags, *extra,
           "--kl-divergence-base", str(out)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode != 0 or not out.is_file():
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}")
    ppl = re.findall(r"Final estimate: (PPL = [0-9.]+ \+/- [0-9.]+)", r.stdout)
    return flags, ppl[-1] if ppl else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", type=Path, default=BIN)
    ap.add_argument("--out", type=Path, default=ROOT / "tests/data/ref_logits")
    ap.add_argument("cases", nargs="*", default=list(CASES))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    ver = version(a.bin)
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        text = text_file(tmp)
        for name in a.cases:
            gguf_path = tmp / f"{name}.gguf"
            sha = write_case(gguf_path, CASES[name])
            out = a.out / f"{name}.kld"
            flags, ppl = kld_base(a.bin, gguf_path, text, [], out)
            meta = {"case": name, "writer": CASES[name], "gguf_sha256": sha, "n_ctx": N_CTX, "n_chunks": N_CHUNKS,
                    "command": "llama-perplexity -m CASE.gguf -f TEXT " + " ".join(flags) + " --kl-divergence-base CASE.kld",
                    "text": f"tests/data/prose_en.txt, its first {4 * N_CTX * N_CHUNKS} characters",
                    "llama_cpp": ver, "final_estimate": ppl}
            (a.out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
            print(f"{name}: {out} ({out.stat().st_size} bytes), {meta['final_estimate']}")


if __name__ == "__main__":
    main()
