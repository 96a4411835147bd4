"""The sizes both sides of vs_llamacpp.py run with, passed to llamapy's child process as JSON."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class Sizes:
    """What both sides run: llama-bench's -p/-n/-r, batched-bench's -npp/-ntg/-npl, perplexity's -c/--chunks."""

    threads: int
    pp: int = 512
    tg: int = 128
    reps: int = 3
    npp: int = 128
    ntg: int = 128
    npl: int = 16  # 0: no batched-bench
    ppl_ctx: int = 128
    ppl_chunks: int = -1  # perplexity's --chunks: -1 = all the text, 0 = no perplexity
    run_ctx: int = 4096  # the short `run` whose peak RSS is compared
    timeout: int = 3600
    no_repack: bool = False  # llama.cpp without its repacked weight layouts (AMX, the aarch64 repack): --repack 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, s: str) -> "Sizes":
        return cls(**json.loads(s))

    def quick(self) -> "Sizes":
        """--quick: small enough for a smoke run in about a minute per model."""
        return Sizes(self.threads, pp=64, tg=16, reps=1, npp=16, ntg=16, npl=16, ppl_ctx=self.ppl_ctx, ppl_chunks=8,
                     run_ctx=self.run_ctx, timeout=self.timeout, no_repack=self.no_repack)
