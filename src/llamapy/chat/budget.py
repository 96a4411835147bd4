"""llama.cpp's reasoning-budget sampler (common/reasoning-budget.cpp) with its grammar gating
(common/sampling.cpp grammar_should_apply), as one constraint the Sampler masks logits with.

States, as llama.cpp's:
  IDLE      before thinking: watching for the start tag (<think>);
  COUNTING  inside thinking: free text, `budget` tokens counted down, the end tag (</think>)
            written by the model ends it (DONE);
  FORCING   budget spent (at a complete UTF-8 character): the forced tokens
            (--reasoning-budget-message + the end tag) one by one, every other logit -inf;
  DONE      the answer: the inner grammar (a tool call, response_format) applies from here,
            fresh; a new start tag re-arms the budget when there is no inner grammar.
Tags are matched as token sequences (each tag tokenized alone), as llama.cpp's matcher.  The
generation prompt's tokens (tokenized alone) go through the machine first, as llama-server's
prefill: QwQ's "<|im_start|>assistant\n<think>\n" starts COUNTING (and its "\n" already counts,
or with budget 0 already takes the first forced token, as llama.cpp).  Where the tag merges with
what precedes it (SmolLM2's vocabulary under DeepSeek-R1's "<｜Assistant｜><think>": "><") the
start is never seen and the budget never starts, as in llama-server.  Budget -1: no limit (the
machine then only gates the grammar).

The inner grammar is not applied while thinking (llama.cpp's lazy tool grammars are not), so a
model can think before it calls.  At the very start of the answer (IDLE) the mask is the inner
grammar's allowed tokens plus the next token of the start tag's tokenization: the model may
open <think> or start the answer; once the start tag is complete the inner grammar is rolled
back to its start for the answer after </think>.  A prompt whose text opened thinking where the
tokens did not show the tag (the merge below) thinks freely until the end tag, uncounted, as
llama.cpp's grammar (its reasoning part) lets it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:
    from ..grammar import Constraint

IDLE, COUNTING, WAITING, FORCING, DONE = "idle", "counting", "waiting_utf8", "forcing", "done"


def utf8_complete(b: bytes) -> bool:
    """b does not end inside a UTF-8 character (common_utf8_is_complete)."""
    for n in range(1, min(4, len(b)) + 1):
        c = b[-n]
        if c & 0xC0 == 0x80:
            continue  # a continuation byte: look further back
        need = 1 if c < 0x80 else 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else 4 if c & 0xF8 == 0xF0 else 1
        return n >= need
    return True


@dataclass(slots=True)
class BudgetTags:
    """The template's thinking tags as tokens (tokenized alone, special tokens parsed, as
    llama-server's reasoning_budget_start_tag / _end_tags) and the forced tokens (message +
    end tag)."""

    start_ids: list[int]
    end_ids: list[int]
    forced_ids: list[int]


def _ends_with(seen: list[int], seq: list[int]) -> bool:
    return bool(seq) and len(seen) >= len(seq) and seen[-len(seq):] == seq


@dataclass(slots=True)
class ReasoningBudget:
    tags: BudgetTags
    budget: int  # -1: unlimited
    piece: Callable[[int], bytes]  # a token's bytes (token_to_piece), for the UTF-8 check
    inner: "Constraint | None" = None
    prefill: list[int] = field(default_factory=list)  # the generation prompt's tokens (llama-server's prefill)
    opened: bool = False  # the prompt's text ends inside thinking (whether or not the tokens showed the tag)
    state: str = IDLE
    remaining: int = 0
    force_pos: int = 0
    n_tokens: int = 0
    _seen: list[int] = field(default_factory=list)  # tokens since the last tag match
    _start_k: int = 0  # start-tag tokens generated at the start of the answer (-1: that path is gone)
    _inner_n: int = 0  # tokens the inner grammar consumed while the start tag was still possible
    _inner_ok: bool = True
    _free: bool = False
    _limit: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._limit = self.budget if self.budget >= 0 else 2**31 - 1
        for t in self.prefill:  # as llama-server: the generation prompt goes through accept()
            self._accept(t)
        self._start_k = 0 if self.state in (IDLE, DONE) else -1
        if self.state == DONE:
            self.state = IDLE
        self._free = self.opened and self.state == IDLE  # opened, tag unseen: free until the end tag
        if self._free:
            self._start_k = -1

    def _arm(self) -> None:
        self.state, self.remaining, self._seen, self._start_k = COUNTING, self._limit, [], -1
        if self.inner is not None and self._inner_n:
            self.inner.rollback(self._inner_n)
            self._inner_n = 0
        if self.remaining <= 0:
            self.state, self.force_pos = FORCING, 0

    def _start_path(self) -> bool:
        return self.state == IDLE and 0 <= self._start_k < len(self.tags.start_ids)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [n_vocab] -> a masked copy for the state (see the module doc)."""
        if self.state == FORCING:
            out = torch.full_like(logits, float("-inf"))
            t = self.tags.forced_ids[self.force_pos]
            out[t] = logits[t] if torch.isfinite(logits[t]) else 0.0
            return out
        if self.state in (COUNTING, WAITING) or self.inner is None or self._free:
            return logits
        if self._start_path():
            ok = self.inner.allowed().clone() if self._inner_ok else torch.zeros(logits.shape[0], dtype=torch.bool)
            ok[self.tags.start_ids[self._start_k]] = True  # [n_vocab]
            return logits.masked_fill(~ok.to(logits.device), float("-inf"))
        return self.inner.apply(logits)

    def _accept(self, token: int) -> None:
        """common_reasoning_budget_accept: the state machine alone."""
        self._seen.append(token)
        if self.state in (IDLE, DONE):
            if _ends_with(self._seen, self.tags.start_ids):
                self._arm()
        elif self.state in (COUNTING, WAITING):
            if _ends_with(self._seen, self.tags.end_ids):
                self.state, self._seen = DONE, []
                return
            complete = utf8_complete(self.piece(token))
            if self.state == WAITING:
                if complete:
                    self.state, self.force_pos, self._seen = FORCING, 0, []
            else:
                self.remaining -= 1
                if self.remaining <= 0:
                    self.state, self.force_pos, self._seen = (FORCING if complete else WAITING), 0, []
        elif self.state == FORCING:
            self.force_pos += 1
            if self.force_pos >= len(self.tags.forced_ids):
                self.state, self._seen = DONE, []

    def advance(self, token: int) -> None:
        """Consume a generated token: the budget's state, and the inner grammar where it applies."""
        self.n_tokens += 1
        if self._free:  # thinking the budget does not count (llama.cpp's grammar lets it run to the end tag)
            self._seen.append(token)
            if _ends_with(self._seen, self.tags.end_ids):
                self._free, self.state, self._seen = False, DONE, []
            return
        if self._start_path():
            if self._inner_ok and self.inner is not None and bool(self.inner.allowed()[token]):
                self.inner.advance(token)
                self._inner_n += 1
            else:
                self._inner_ok = False
            if token == self.tags.start_ids[self._start_k]:
                self._start_k += 1
                if self._start_k == len(self.tags.start_ids):
                    self._arm()
                    return
                self._seen.append(token)
            else:
                self._start_k, self.state, self._seen = -1, DONE, []
            return
        if self.state == DONE and self.inner is not None:  # the answer: the grammar's (no re-arming)
            self.inner.advance(token)
            return
        self._accept(token)

    def valid_prefix(self, tokens: list[int]) -> int:
        """Drafts are checked only in the answer, against the inner grammar; none is taken
        while the budget may mask (thinking counts are per token)."""
        if self.state == DONE and self.inner is not None:
            return self.inner.valid_prefix(tokens)
        return 0
