"""Coverage-guided fuzzing (atheris: libFuzzer for Python) of the GGUF header walk and the
hyperparameter checks, on bytes in memory (GGUFHeader.from_bytes + hparams_from_gguf).

    python tests/fuzz_gguf_atheris.py --make-corpus DIR        # seed inputs: small real GGUFs
    python tests/fuzz_gguf_atheris.py DIR -atheris_runs=20000  # bounded run (the suite)
    python tests/fuzz_gguf_atheris.py DIR -max_total_time=300  # `make fuzz`

Every input must parse or raise GGUFError naming the input and a byte offset or a missing
key; anything else is an uncaught exception, which libFuzzer reports as a crash (exit status
non-zero, the input saved under -artifact_prefix).  Memory is capped with RLIMIT_AS at
VmPeak + 1 GiB after the imports, so a hostile count that makes the parser allocate fails
with a MemoryError (a crash) instead of taking the machine; -timeout catches a hang."""
from __future__ import annotations

import re
import resource
import sys
from pathlib import Path

import atheris
import gguf  # noqa: F401  (imported before the instrumentation: only llamapy is instrumented)
import numpy  # noqa: F401

with atheris.instrument_imports(include=["llamapy"]):
    from llamapy.gguf.header import GGUFError, GGUFHeader
    from llamapy.model.hparams import hparams_from_gguf

NAME = "fuzz.gguf"
MESSAGE = re.compile(r"\bbyte \d|\boffset [\d,]+|\bis missing\b")


def TestOneInput(data: bytes) -> None:  # noqa: N802 (atheris' name)
    try:
        hparams_from_gguf(GGUFHeader.from_bytes(data, NAME))
    except GGUFError as e:
        msg = str(e)
        if NAME not in msg or not MESSAGE.search(msg):
            raise AssertionError(f"GGUFError without the input's name and a byte offset or missing key: {msg!r}") from e


def make_corpus(folder: Path) -> None:
    """Small real GGUFs (llama and gemma3, F32 and Q8_0) and their headers alone."""
    import gguf as g
    from tiny_gemma3 import write_tiny_gemma3
    from tiny_model import write_tiny_llama

    folder.mkdir(parents=True, exist_ok=True)
    files = [write_tiny_llama(folder / "llama.gguf", n_embd=8, n_layer=1, n_head=2, n_head_kv=1, n_ff=16),
             write_tiny_llama(folder / "llama-q8.gguf", n_embd=32, n_layer=1, n_head=2, n_head_kv=1, n_ff=32,
                              weight_type=g.GGMLQuantizationType.Q8_0),
             write_tiny_gemma3(folder / "gemma3.gguf", n_embd=8, n_layer=1, n_head=2, n_head_kv=1, head_dim=4,
                               n_ff=16)]
    for p in files:
        h = GGUFHeader(p)
        (folder / (p.stem + "-header.gguf")).write_bytes(p.read_bytes()[: h.data_offset])


def cap_memory(headroom: int = 1 << 30) -> None:
    with open("/proc/self/status") as fh:
        peak = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmPeak:"))
    resource.setrlimit(resource.RLIMIT_AS, (peak + headroom, resource.getrlimit(resource.RLIMIT_AS)[1]))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--make-corpus":
        make_corpus(Path(sys.argv[2]))
        return
    cap_memory()
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
