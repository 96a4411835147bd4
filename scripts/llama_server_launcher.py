#!/usr/bin/env python3
"""The `LLAMA_SERVER_BIN_PATH` of scripts/llama_server_suite.sh: reads the command line that
llama.cpp's server test suite (tools/server/tests/utils.py, ServerProcess.start) builds, maps
the suite's model presets (--hf-repo / --hf-file, which llama-server would download from a
hub) to LOCAL GGUF files, and execs `llamapy serve` -- or, with LLAMA_SUITE_SERVER=llama-server,
llama.cpp's own llama-server with the same mapping, so both run on the same models.

Every flag llamapy serve does not read is printed on stderr as `unsupported: FLAG [VALUE]`
(never dropped silently); a preset with no local model is refused with `unsupported: model ...`
and exit status 2.  Local models:
  chat / completion presets  -> SmolLM2-135M-Instruct (~/.cache/llamapy/models/smollm2-135m)
  tinygemma3                 -> gemma-3-270m (~/.cache/llamapy/models/gemma3-270m)
  bert-bge-small             -> a tiny random BERT, CLS pooling (tests/tiny_bert.py)
  jina-reranker-v1-tiny-en   -> a tiny random BERT with a rank head (tests/tiny_bert.py)
  stories260K-infill         -> a tiny random llama with FIM tokens (tests/tiny_model.py)
The tiny ones are written once under ~/.cache/llamapy/suite-models.

With LLAMA_SUITE_ZYGOTE=SOCKET (scripts/llama_server_suite.sh sets it), `llamapy serve` is not
exec'd: scripts/llama_server_zygote.py, which has imported llamapy, torch and uvicorn once, forks
it with this process's argv, environment, cwd and stdio, and this process stays as its stand-in
(SIGTERM/SIGINT are passed on, its exit status is the server's)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOME = Path(os.environ.get("LLAMAPY_HOME", Path.home() / ".cache" / "llamapy"))
SMOLLM2 = HOME / "models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3 = HOME / "models/gemma3-270m/gemma-3-270m-q4_k_m.gguf"
SUITE_MODELS = HOME / "suite-models"
LLAMA_SERVER = Path(os.environ.get("LLAMA_SERVER_REF", "/root/.cache/llamacpp-ref/llama.cpp/build/bin/llama-server"))
FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_repo|>", "<|file_sep|>")

# flags utils.py passes without a value (every other flag it passes takes one)
BOOLEAN = {"--offline", "--cont-batching", "--embedding", "--reranking", "--metrics", "--kv-unified", "--swa-full",
           "--slots", "--no-slots", "--verbose", "--context-shift", "--no-ui", "--no-models-autoload", "--jinja",
           "--no-jinja", "--no-mmproj", "--no-cache-idle-slots", "--cache-idle-slots", "--ui-mcp-proxy", "--backend_sampling", "-cb",
           "--no-context-shift", "--ctx-shift", "--props", "--no-webui", "--log-disable"}


def _tiny(name: str) -> Path:
    """A tiny GGUF written with the repo's test helpers (once; same seed, same bytes)."""
    path = SUITE_MODELS / name
    if path.exists():
        return path
    sys.path.insert(0, str(REPO / "tests"))
    SUITE_MODELS.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    if name == "tiny-bert-cls.gguf":
        from tiny_bert import write_tiny_bert
        write_tiny_bert(tmp, seed=0, pooling=2)
    elif name == "tiny-bert-rank.gguf":
        from tiny_bert import write_tiny_bert
        write_tiny_bert(tmp, seed=1, pooling=4, rank_head=True)
    elif name == "tiny-llama-fim.gguf":
        from tiny_model import write_tiny_llama
        write_tiny_llama(tmp, extra_control=FIM)
    else:
        raise ValueError(name)
    tmp.rename(path)
    return path


def local_model(repo: str | None, file: str | None) -> Path | None:
    """The local GGUF standing in for the suite's --hf-repo/--hf-file preset (None: no mapping)."""
    key = f"{repo or ''}/{file or ''}"
    if "bert-bge-small" in key:
        return _tiny("tiny-bert-cls.gguf")
    if "jina-reranker" in key:
        return _tiny("tiny-bert-rank.gguf")
    if "stories260K-infill" in key:
        return _tiny("tiny-llama-fim.gguf")
    if "tinygemma3" in key:
        return GEMMA3
    if "stories260K" in key or "stories15M" in key or "tinyllamas/" in key:
        return SMOLLM2
    return None


def known_flags() -> set[str]:
    """Every option string `llamapy serve` reads."""
    sys.path.insert(0, str(REPO / "src"))
    from llamapy.cli.main import build_parser

    ap = build_parser()
    sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction")
    return set(sub.choices["serve"]._option_string_actions)


def split_args(argv: list[str]) -> list[list[str]]:
    """[[flag, value?], ...] in order, by the suite's arity (BOOLEAN: no value)."""
    out: list[list[str]] = []
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in BOOLEAN or i + 1 >= len(argv) or argv[i + 1].startswith("--"):
            out.append([flag])
            i += 1
        else:
            out.append([flag, argv[i + 1]])
            i += 2
    return out


def build(argv: list[str], ref: bool) -> list[str]:
    """The server's command line (without the program), with the model mapped."""
    pairs = split_args(argv)
    opts = {p[0]: (p[1] if len(p) > 1 else "") for p in pairs}
    repo, file = opts.get("--hf-repo") or opts.get("-hf"), opts.get("--hf-file") or opts.get("-hff")
    has_model = "--model" in opts or "-m" in opts
    out: list[str] = []
    if not has_model and (repo or file):
        path = local_model(repo, file)
        if path is None:
            print(f"unsupported: model --hf-repo {repo} --hf-file {file} (no local GGUF stands in for it; "
                  f"scripts/llama_server_launcher.py maps the suite's presets)", file=sys.stderr, flush=True)
            sys.exit(2)
        print(f"launcher: --hf-repo {repo} --hf-file {file} -> {path}", file=sys.stderr, flush=True)
        out += ["--model", str(path)]
    elif not has_model and not ref:
        print(f"unsupported: router mode (no --model): llamapy serves one model; serving {SMOLLM2.name}",
              file=sys.stderr, flush=True)
        out += ["--model", str(SMOLLM2)]
    known = None if ref else known_flags()
    for p in pairs:
        if p[0] in ("--hf-repo", "-hf", "--hf-file", "-hff"):
            continue
        if known is not None and p[0] not in known:
            print(f"unsupported: {' '.join(p)}", file=sys.stderr, flush=True)
            continue
        out += p
    return out


def via_zygote(path: str, argv: list[str]) -> int:
    """Have the zygote fork `llamapy serve` for argv; relay SIGTERM/SIGINT; its exit status."""
    import json
    import signal
    import socket
    import struct

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [0, 1, 2])
    for sig, msg in ((signal.SIGTERM, b"T"), (signal.SIGINT, b"I")):
        signal.signal(sig, lambda *_, m=msg: conn.send(m))
    data = b""
    while len(data) < 4:
        more = conn.recv(4 - len(data))
        if not more:
            return 1
        data += more
    return struct.unpack("!i", data)[0]


def main() -> None:
    ref = os.environ.get("LLAMA_SUITE_SERVER", "llamapy") == "llama-server"
    zygote = os.environ.get("LLAMA_SUITE_ZYGOTE")
    if zygote and not ref:
        sys.exit(via_zygote(zygote, sys.argv[1:]))
    args = build(sys.argv[1:], ref)
    if ref:
        prog = [str(LLAMA_SERVER)]
    else:
        py = os.environ.get("LLAMAPY_PYTHON", sys.executable)
        prog = [py, "-m", "llamapy", "serve"]
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))
    print(f"launcher: exec {' '.join(prog + args)}", file=sys.stderr, flush=True)
    os.execv(prog[0], prog + args)


if __name__ == "__main__":
    main()
