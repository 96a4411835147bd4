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
    (llama_batch_get_one style); otherwise positions are taken as given and validated.

    Nothing is checked here (common_batch_add does not check either): the allocator
    validates the whole batch in one place, before anything runs.
    """

    token: list[int] = field(default_factory=list)
    pos: list[int | None] = field(default_factory=list)
    seq_id: list[tuple[int, ...]] = field(default_factory=list)
    logits: list[bool] = field(default_factory=list)

    def add(self, token: int, pos: int | None, seq_ids: Sequence[int] = (0,), logits: bool = False) -> None:
        """common_batch_add: append one token slot.  seq_ids[0] is the sequence the slot's
        query attends as (the mask row); the slot's K/V cell is shared by all of seq_ids."""
        self.token.append(int(token))
        self.pos.append(None if pos is None else int(pos))
        self.seq_id.append(tuple(int(s) for s in seq_ids))
        self.logits.append(bool(logits))

    def clear(self) -> None:
        """common_batch_clear: drop every slot (the lists are emptied in place)."""
        self.token.clear()
        self.pos.clear()
        self.seq_id.clear()
        self.logits.clear()

    @property
    def n_tokens(self) -> int:
        return len(self.token)

    def __len__(self) -> int:
        return len(self.token)

    @classmethod
    def get_one(cls, tokens: Sequence[int], seq_id: int = 0) -> "Batch":
        """llama_batch_get_one: tokens of one sequence, positions continued automatically,
        logits for the last token only."""
        batch = cls()
        n = len(tokens)
        for i, tok in enumerate(tokens):
            batch.add(tok, None, (seq_id,), logits=(i == n - 1))
        return batch


@dataclass(frozen=True, slots=True)
class UBatch:
    """One ubatch: the rows that go through the network together.  One entry per token slot.

    idx[i] is the slot's index in the submitted batch; output[i] says its logits are wanted.
    seq_id[i][0] is the sequence the row's query masks against (llama.cpp: ubatch->seq_id[i][0]).
    n_seqs: number of sequence sets (rows are grouped by set when equal_seqs; split_simple
    counts every row as its own set, as llama.cpp does).  0 on construction means n_tokens.
    """

    token: tuple[int, ...]
    pos: tuple[int, ...]
    seq_id: tuple[tuple[int, ...], ...]
    output: tuple[bool, ...]
    idx: tuple[int, ...]
    equal_seqs: bool = False
    n_seqs: int = 0

    def __post_init__(self) -> None:
        if self.n_seqs == 0:
            object.__setattr__(self, "n_seqs", len(self.token))

    @property
    def n_tokens(self) -> int:
        return len(self.token)

    @property
    def n_outputs(self) -> int:
        return sum(self.output)

    @property
    def n_seq_tokens(self) -> int:
        """Tokens per sequence set (llama.cpp n_seq_tokens)."""
        return self.n_tokens // self.n_seqs if self.n_seqs else 0

    @property
    def seq_id_unq(self) -> tuple[int, ...]:
        """Distinct sequence ids in the ubatch, ascending."""
        return tuple(sorted({s for sids in self.seq_id for s in sids}))

    @classmethod
    def reserve(cls, n_seq_tokens: int, n_seqs: int) -> "UBatch":
        """llama_batch_allocr::ubatch_reserve: a well-formed worst-case ubatch for sizing
        buffers: token 0, positions 0..n_seq_tokens-1 per set, set s = sequence s, no outputs."""
        n = n_seq_tokens * n_seqs
        return cls(
            token=(0,) * n,
            pos=tuple(p for _ in range(n_seqs) for p in range(n_seq_tokens)),
            seq_id=tuple((s,) for s in range(n_seqs) for _ in range(n_seq_tokens)),
            output=(False,) * n,
            idx=tuple(range(n)),
            equal_seqs=True,
            n_seqs=max(n_seqs, 1),
        )
