"""Batch: llama.cpp's llama_batch, a list of token slots handed to one Context.decode() call.

A slot is (token, pos, seq_ids, logits).  It is a work order, not a stack of examples:
six slots may be six positions of one sequence or one position of six sequences.
No torch here: this is bookkeeping.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass(slots=True)
class Batch:
    """llama_batch.  `pos[i] is None` asks the allocator to continue the sequence
    (llama_batch_get_one style); otherwise positions are taken as given and validated."""

    token: list[int] = field(default_factory=list)
    pos: list[int | None] = field(default_factory=list)
    seq_id: list[tuple[int, ...]] = field(default_factory=list)
    logits: list[bool] = field(default_factory=list)

    def add(self, token: int, pos: int | None, seq_ids: Sequence[int] = (0,), logits: bool = False) -> None:
        """common_batch_add: append one token slot."""
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    @property
    def n_tokens(self) -> int:
        return len(self.token)

    def __len__(self) -> int:
        return len(self.token)

    @classmethod
    def get_one(cls, tokens: Sequence[int], seq_id: int = 0) -> "Batch":
        """llama_batch_get_one: tokens of one sequence, positions continued automatically,
        logits for the last token only."""
        raise NotImplementedError
