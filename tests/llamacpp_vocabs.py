"""llama.cpp's tokenizer test vocabularies (models/ggml-vocab-*.gguf with .inp/.out), fetched
once from the llama-cpp-python sdist on PyPI (the only network the suite may use) into
$LLAMAPY_HOME/llamacpp-vocabs/<version>/, and read as tests/test-tokenizer-0.cpp reads them.

Contract: `vocab_dir()` returns a folder holding every `ggml-vocab-*` file of the sdist's
vendor/llama.cpp/models/ and its src/llama-vocab.cpp, extracting only those on first use; it
raises VocabFetchError (never skips) when PyPI cannot be reached.  `read_cases(gguf)` returns
the (text, ids) pairs of `<gguf>.inp` / `<gguf>.out` in file order."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from llamapy.pull import llamapy_home

VERSION = "0.3.36"                       # llama-cpp-python, as /work/shared/tools/build-llamacpp.sh
SEP = "\n__ggml_vocab_test__\n"          # test-tokenizer-0.cpp's separator of .inp cases
_MEMBER = "/vendor/llama.cpp/models/ggml-vocab-"
_VOCAB_CPP = "/vendor/llama.cpp/src/llama-vocab.cpp"   # the pre types' regexes, for test_tokenizer_pre.py
_TEMPLATE = "/vendor/llama.cpp/models/templates/"       # the chat templates, for test_chat_*.py


class VocabFetchError(RuntimeError):
    """The sdist could not be downloaded or did not hold the vocab files."""


def _extract(sdist: Path, dest: Path) -> int:
    """Copy the sdist's vendor/llama.cpp/models/ggml-vocab-* members (and src/llama-vocab.cpp)
    into dest, its models/templates/* into dest/templates; the count of vocab files."""
    n = 0
    (dest / "templates").mkdir(exist_ok=True)
    with tarfile.open(sdist, "r:gz") as tar:
        for m in tar:
            template = _TEMPLATE in m.name
            if not m.isfile() or (_MEMBER not in m.name and not m.name.endswith(_VOCAB_CPP) and not template):
                continue
            src = tar.extractfile(m)
            assert src is not None
            with src, open(dest / ("templates" if template else "") / Path(m.name).name, "wb") as out:
                shutil.copyfileobj(src, out)
            n += not template
    return n


def vocab_dir(home: Path | None = None, version: str = VERSION) -> Path:
    """The folder of ggml-vocab-* files, fetched from PyPI on first use (see the module doc)."""
    final = llamapy_home(home) / "llamacpp-vocabs" / version
    if (final / ".complete").exists() and (final / "llama-vocab.cpp").exists() and (final / "templates").is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", f"llama-cpp-python=={version}", "-d", tmp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        sdists = sorted(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if r.returncode != 0 or not sdists:
            raise VocabFetchError(
                f"could not download the llama-cpp-python=={version} sdist from PyPI (it holds "
                f"llama.cpp's ggml-vocab-* test files): `{' '.join(cmd)}` exited {r.returncode}\n"
                f"{r.stderr[-2000:]}")
        stage = Path(tmp) / "vocabs"
        stage.mkdir()
        if _extract(sdists[0], stage) == 0:
            raise VocabFetchError(f"{sdists[0].name} holds no vendor/llama.cpp/models/ggml-vocab-* files")
        (stage / ".complete").touch()
        if final.exists():
            shutil.rmtree(final)
        stage.rename(final)
    return final


def templates_dir(home: Path | None = None, version: str = VERSION) -> Path:
    """llama.cpp's models/templates/ (chat templates, .jinja), from the same sdist."""
    return vocab_dir(home, version) / "templates"


def read_cases(gguf: Path) -> list[tuple[str, list[int]]]:
    """The cases of `<gguf>.inp` / `<gguf>.out`, split exactly as read_tests() in
    test-tokenizer-0.cpp: inputs at SEP (a trailing SEP opens no empty case), one .out line
    of space-separated ids per input."""
    raw = Path(f"{gguf}.inp").read_bytes().decode("utf-8")
    texts: list[str] = []
    pos = 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    lines = Path(f"{gguf}.out").read_bytes().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(texts) != len(lines):
        raise ValueError(f"{gguf.name}: {len(texts)} inputs but {len(lines)} output lines")
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


def pre_type_regexes(vocab_cpp: Path, case: str) -> tuple[tuple[str, ...], list[str]]:
    """The regex_exprs llama-vocab.cpp sets under `case LLAMA_VOCAB_PRE_TYPE_<case>:` (C++
    string literals decoded), and the string literals of the `//` comment lines inside that
    list (e.g. the "original regex from tokenizer.json")."""
    src = vocab_cpp.read_text(encoding="utf-8")
    start = src.index(f"case LLAMA_VOCAB_PRE_TYPE_{case}:")
    body = src[src.index("regex_exprs = {", start):]
    body = body[:body.index("};")]
    exprs: list[str] = []
    comments: list[str] = []
    for line in body.splitlines()[1:]:
        s = line.strip()
        into = comments if s.startswith("//") else exprs
        s = s.lstrip("/ ").rstrip(",")
        if len(s) >= 2 and s[0] == s[-1] == '"':
            into.append(s[1:-1].encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8"))
    return tuple(exprs), comments
