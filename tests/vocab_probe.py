"""Run as a subprocess by test_startup.py: the resident memory a tokenizer load adds, as the
operating system counts it (VmRSS), printed as one JSON line beside the header's estimate.

The `tokenizers` library and llamapy's tokenizer modules are imported first, so the "before"
reading has their code and the growth is the tokenizer's tables: the Vocab and its derived
tables (Tokenizer.from_gguf) and the whole `tokenizers` model (Tokenizer.hf), which is what
memory/process.py's vocabulary term predicts ("up to": the whole model built)."""
from __future__ import annotations

import gc
import json
import sys

from proc_status import status


def main() -> None:
    path = sys.argv[1]
    import tokenizers  # noqa: F401

    from llamapy.gguf.header import GGUFHeader
    from llamapy.memory.process import process_estimate
    from llamapy.tokenizer import Tokenizer

    est = process_estimate(GGUFHeader(path), 0)
    gc.collect()
    rss0 = status("VmRSS")
    tok = Tokenizer.from_gguf(path)
    tok.hf  # the whole model: the estimate's "up to"
    tok.tokenize("The quick brown fox jumps over the lazy dog.")
    gc.collect()
    out = {"growth": status("VmRSS") - rss0, "vocab": est.vocab, "metadata": est.metadata, "n_vocab": tok.n_vocab}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
