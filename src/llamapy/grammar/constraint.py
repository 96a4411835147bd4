"""One sequence's grammar constraint: the llguidance matcher, its token mask, and the
overlap of that mask's computation with the model's forward pass.

Contract: advance(token) for each generated token, in order; apply(logits) before each
sample.  advance() starts computing the next mask on the compiler's worker thread
(llguidance releases the GIL), so it runs while the caller decodes the token; apply() waits
for it.  A mask that leaves no token with a finite logit raises GrammarDeadEnd."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
import llguidance
import numpy as np
import torch


class GrammarDeadEnd(RuntimeError):
    """The grammar allows no token here (or only tokens banned elsewhere, e.g. by ignore_eos)."""


class Constraint:
    def __init__(self, matcher: llguidance.LLMatcher, n_vocab: int, pool: ThreadPoolExecutor) -> None:
        self.matcher, self.n_vocab, self.pool = matcher, n_vocab, pool
        self._bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)  # [n_words] one bit per token id
        self._future: Future | None = None
        self.n_tokens = 0  # tokens consumed
        self._start()

    def _compute(self) -> None:
        self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)

    def _start(self) -> None:
        self._future = self.pool.submit(self._compute)

    def _wait(self) -> None:
        """Finish the mask computation in flight: the matcher is not to be used by two threads."""
        if self._future is not None:
            self._future.result()
            self._future = None

    def _bits_bool(self) -> np.ndarray:
        """The next token's mask [n_vocab] as numpy bool (waits for the computation advance()
        started)."""
        self._wait()
        if self.matcher.is_error():
            raise GrammarDeadEnd(f"grammar error: {self.matcher.get_error()}")
        return np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self.n_vocab].view(np.bool_)

    def allowed(self) -> torch.Tensor:
        """The next token's mask [n_vocab] bool."""
        return torch.from_numpy(self._bits_bool())

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [n_vocab] -> a masked copy (disallowed tokens -inf).  Raises GrammarDeadEnd
        when no allowed token has a finite logit.  On CPU float32 it is one numpy pass
        (half the time of the torch ops, which matters at one call per token)."""
        ok = self._bits_bool()  # [n_vocab]
        if logits.device.type == "cpu" and logits.dtype == torch.float32:
            out_np = np.where(ok, logits.detach().numpy(), np.float32(-np.inf))  # [n_vocab]
            alive = bool(np.isfinite(out_np).any())
            out = torch.from_numpy(out_np)
        else:
            out = logits.masked_fill(~torch.from_numpy(ok).to(logits.device), float("-inf"))
            alive = bool(torch.isfinite(out).any())
        if not alive:
            n = int(ok.sum())
            why = "the grammar allows no token here" if n == 0 else \
                f"the grammar allows only {n} token(s) here and all are banned (e.g. end-of-generation with ignore_eos)"
            raise GrammarDeadEnd(f"{why} after {self.n_tokens} generated token(s)")
        return out

    def advance(self, token: int) -> None:
        """Consume a generated token (one apply() allowed) and start the next mask."""
        self._wait()  # advance without apply (a forced path): the old mask first
        if not self.matcher.consume_token(token):
            raise GrammarDeadEnd(f"token {token} rejected by the grammar: {self.matcher.get_error()}")
        self.n_tokens += 1
        if not self.matcher.is_stopped():
            self._start()
        else:
            self._compute()  # stopped: only end-of-generation; cheap

    def rollback(self, n: int) -> None:
        """Undo the last n consumed tokens (the reasoning budget's start-of-answer path)."""
        self._wait()
        if not self.matcher.rollback(n):
            raise GrammarDeadEnd(f"grammar rollback of {n} token(s) failed: {self.matcher.get_error()}")
        self.n_tokens -= n
        self._start()

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of tokens (a draft following the consumed ones) the grammar accepts.  It
        waits for the next mask (the matcher is busy with it), so with drafts the mask is not
        overlapped with the forward pass."""
        self._wait()
        return self.matcher.validate_tokens(tokens) if tokens else 0
