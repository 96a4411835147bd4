"""The host memory `serve --cache-ram N` may hold (server/ram_cache.py, llama-server's
server_prompt_cache), known before the server runs, and how it meets --mem-budget.

A saved prompt costs, per token, every cache's K and V rows over its layers (the cache's
bytes_per_token), each cell's position and shift (int32 each), and the token id (int32).  The
entries never hold more than the limit: N MiB when N > 0 (llama-server makes room before each
copy and skips an entry larger than the limit).  With N = -1 (no limit) only the token bound
holds: after each update the entries keep at most n_ctx tokens, and the entry just copied (at
most n_ctx_seq tokens) comes on top until then.  N = 0: no prompt cache.

Against the budget: the context is fitted first (memory/fit.py), and the prompt cache gets
what is left.  A limit the user chose (--cache-ram given) that does not fit a budget the user
chose (--mem-budget given) is refused with the numbers; any other limit that does not fit is
lowered to what is left (logged), since neither number was the user's."""
from __future__ import annotations

from dataclasses import dataclass

from .estimate import MiB, MemoryEstimate

CELL_META_BYTES = 8  # a saved cell's position and shift, int32 each (memory/seq_state.py CacheState)
TOKEN_BYTES = 4  # a saved prompt's token id, int32


class CacheRamBudgetError(ValueError):
    """--cache-ram and --mem-budget, both given, do not fit together; the message has the numbers."""


def state_bytes_per_token(e: MemoryEstimate) -> int:
    """A saved prompt's bytes per token (seq_state_size's per-cell bytes, summed over the caches, plus the token id)."""
    return sum(ch.bytes_per_token + CELL_META_BYTES for ch in e.caches) + TOKEN_BYTES


@dataclass(frozen=True, slots=True)
class CacheRamEstimate:
    """--cache-ram's bound for one context: mib as given (-1: no limit, 0: off)."""

    mib: int
    bytes_per_token: int  # state_bytes_per_token of the context's caches
    n_ctx: int
    n_ctx_seq: int

    @property
    def bound(self) -> int:
        """The most bytes the prompt cache's entries can hold."""
        if self.mib == 0:
            return 0
        if self.mib > 0:
            return self.mib * MiB
        return (self.n_ctx + self.n_ctx_seq) * self.bytes_per_token

    def line(self) -> str:
        if self.mib == 0:
            return "prompt cache (serve --cache-ram, host memory): off (--cache-ram 0; serve's default is 8192 MiB)"
        tokens = self.bound // self.bytes_per_token
        how = (f"--cache-ram {self.mib}" if self.mib > 0
               else f"--cache-ram -1: n_ctx {self.n_ctx} tokens + one entry of up to {self.n_ctx_seq}")
        return (f"prompt cache (serve {how}, host memory): up to {self.bound / MiB:.2f} MiB "
                f"({self.bytes_per_token} bytes a token: K/V rows, position, shift, token id; {tokens} tokens)")


def cache_ram_estimate(e: MemoryEstimate, mib: int) -> CacheRamEstimate:
    return CacheRamEstimate(mib, state_bytes_per_token(e), e.cparams.n_ctx, e.cparams.n_ctx_seq)


def fit_cache_ram(c: CacheRamEstimate, context_bytes: int, budget: int, mib_given: bool, budget_given: bool) -> int:
    """The --cache-ram limit (MiB, as the flag: -1, 0 or N) to run with when the context
    already takes context_bytes of budget.  Raises CacheRamBudgetError when both flags were
    given and do not fit; otherwise a limit over what is left is lowered to it (0 when nothing is)."""
    left = budget - context_bytes
    if c.bound <= left:
        return c.mib
    fit_mib = max(0, left // MiB)
    if mib_given and budget_given:
        raise CacheRamBudgetError(
            f"--cache-ram {c.mib} holds up to {c.bound / MiB:.2f} MiB of prompts, but the context takes "
            f"{context_bytes / MiB:.2f} MiB of the memory budget of {budget / MiB:.2f} MiB, leaving "
            f"{max(0, left) / MiB:.2f} MiB: lower --cache-ram to {fit_mib} or less, or raise --mem-budget")
    return fit_mib
