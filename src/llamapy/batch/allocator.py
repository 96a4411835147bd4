"""llama_batch_allocr: validate a Batch before anything runs, fill in automatic positions,
map outputs, and split it into ubatches (split_simple / split_equal).  No torch.

Contract: `init()` raises BatchError (a ValueError) with the numbers and changes nothing
anywhere; after a successful `init()`, `split_simple()`/`split_equal()` return UBatch views
until the batch is used up (then None).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .batch import Batch


class BatchError(ValueError):
    """A batch that cannot be decoded; the message names the numbers and the flag to change."""


@dataclass(frozen=True, slots=True)
class UBatch:
    """One ubatch: the rows that go through the network together.  One entry per token slot.

    idx[i] is the slot's index in the submitted batch; output[i] says its logits are wanted.
    seq_id[i][0] is the sequence the row's query masks against (llama.cpp: ubatch->seq_id[i][0]).
    """

    token: tuple[int, ...]
    pos: tuple[int, ...]
    seq_id: tuple[tuple[int, ...], ...]
    output: tuple[bool, ...]
    idx: tuple[int, ...]

    @property
    def n_tokens(self) -> int:
        return len(self.token)

    @property
    def n_outputs(self) -> int:
        return sum(self.output)


class BatchAllocator:
    """Validates and splits one batch at a time (llama_batch_allocr).

    seq_pos_max(s) / seq_pos_min(s) come from the memory: -1 when sequence s is absent.
    """

    def __init__(self, n_vocab: int, n_batch: int, n_seq_max: int) -> None:
        raise NotImplementedError

    def init(self, batch: Batch, seq_pos_max: Callable[[int], int], output_all: bool = False) -> None:
        """Validate `batch` and prepare it for splitting.  Errors (each a BatchError):
        - empty batch: "n_tokens == 0: cannot decode an empty batch"
        - len > n_batch: "n_tokens (5000) > n_batch (2048): ... raise -b/--batch-size or split the batch"
        - token id outside [0, n_vocab): names the slot index, the id and n_vocab
        - seq_id outside [0, n_seq_max): names it and n_seq_max (-np / n_seq_max)
        - positions of a sequence that do not continue it: memory's last position X, the batch's
          first position Y (should be X+1); or positions inside the batch that are not
          consecutive/increasing for that sequence.
        Missing positions (None) continue the sequence: seq_pos_max(s)+1, then +1 per slot.
        If no slot asks for logits and output_all is False, nothing is output (llama.cpp
        outputs the last token only for llama_batch_get_one; Batch.get_one sets that flag).
        """
        raise NotImplementedError

    @property
    def batch_pos(self) -> list[int]:
        """Resolved positions of every slot after init()."""
        raise NotImplementedError

    @property
    def n_outputs(self) -> int:
        raise NotImplementedError

    @property
    def output_ids(self) -> list[int]:
        """output_ids[i] = row in the logits buffer of batch slot i, or -1 if not output."""
        raise NotImplementedError

    def split_reset(self) -> None:
        raise NotImplementedError

    def split_simple(self, n_ubatch: int) -> UBatch | None:
        """Next ubatch: up to n_ubatch unused slots in submission order, sequences mixed freely."""
        raise NotImplementedError

    def split_equal(self, n_ubatch: int, sequential: bool) -> UBatch | None:
        """Next ubatch for per-sequence streams (llama.cpp split_equal): pick sequence sets that
        do not overlap, take the same number of tokens from each (as many as fit in n_ubatch),
        rows grouped by sequence set.  sequential=True requires the chosen seq_ids to be
        consecutive (s, s+1, ...), as llama.cpp does for non-unified caches."""
        raise NotImplementedError
