"""llama_batch_allocr: validate a Batch before anything runs, fill in automatic positions,
map outputs, and split it into ubatches (split_simple / split_equal / split_seq).  No torch.

Contract: `init()` raises BatchError (a ValueError) with the numbers and changes nothing
outside the allocator (it only reads the memory through the callables it is given); after
a successful `init()`, the split_* methods return UBatch views until the batch is used up
(then None).  A sequence set is a Python int used as a bitset (bit s = sequence s).
"""
from __future__ import annotations

from typing import Callable

from .batch import Batch, UBatch
from .validate import BatchError, ResolvedBatch, resolve_batch

__all__ = ["BatchAllocator", "BatchError", "UBatch"]


class BatchAllocator:
    """Validates and splits one batch at a time (llama_batch_allocr).

    seq_pos_max(s) / seq_pos_min(s) come from the memory: -1 when sequence s is absent.
    """

    def __init__(self, n_vocab: int, n_batch: int, n_seq_max: int) -> None:
        for name, v in (("n_vocab", n_vocab), ("n_batch", n_batch), ("n_seq_max", n_seq_max)):
            if v < 1:
                raise ValueError(f"{name} ({v}) must be >= 1")
        self.n_vocab = n_vocab
        self.n_batch = n_batch
        self.n_seq_max = n_seq_max
        self._b: ResolvedBatch | None = None
        self._used: list[bool] = []
        self._n_used = 0
        self._out_ids: list[int] = []

    # --- init --------------------------------------------------------------------------------
    def init(
        self,
        batch: Batch,
        seq_pos_max: Callable[[int], int],
        output_all: bool = False,
        seq_pos_min: Callable[[int], int] | None = None,
    ) -> None:
        """Validate `batch` and prepare it for splitting.  Errors (each a BatchError):
        - empty batch: "n_tokens == 0: cannot decode an empty batch"
        - len > n_batch: "n_tokens (5000) > n_batch (2048): ... -b/--batch-size"
        - token id outside [0, n_vocab): names the slot index, the id and n_vocab
        - seq_id outside [0, n_seq_max): names it and n_seq_max (-np / n_seq_max)
        - positions of a sequence that do not continue it: memory's last position X, the batch's
          first position Y (should be X+1); or positions inside the batch that are not
          consecutive (a gap) or decrease for that sequence (repeats are allowed, as in
          llama.cpp); a sequence in two incompatible sequence sets; coupled sequences whose
          memory ranges differ (checked when seq_pos_min is given).
        Missing positions (None) continue the slot's first sequence: its last position so far
        in this batch + 1, else seq_pos_max(s) + 1.
        If no slot asks for logits and output_all is False, nothing is output (llama.cpp
        outputs the last token only for llama_batch_get_one; Batch.get_one sets that flag).
        output_all=True marks every slot as an output (embeddings).
        On error the allocator is left empty (split_* return None).
        """
        self._b = None
        self.split_reset()
        b = resolve_batch(batch, self.n_vocab, self.n_batch, self.n_seq_max,
                          seq_pos_max, seq_pos_min, output_all)
        self._b = b
        self.split_reset()

    # --- results of init ---------------------------------------------------------------------
    def _get(self) -> ResolvedBatch:
        if self._b is None:
            raise RuntimeError("BatchAllocator: call init() with a valid batch first")
        return self._b

    @property
    def n_tokens(self) -> int:
        return 0 if self._b is None else len(self._b.token)

    @property
    def batch_pos(self) -> list[int]:
        """Resolved positions of every slot after init()."""
        return list(self._get().pos)

    @property
    def n_outputs(self) -> int:
        return self._get().n_outputs

    @property
    def output_ids(self) -> list[int]:
        """output_ids[i] = row in the logits buffer of batch slot i, or -1 if not output.
        Rows follow submission order (llama.cpp reorders its outputs back to batch order)."""
        return list(self._get().output_ids)

    @property
    def out_ids(self) -> list[int]:
        """Batch indices of the outputs in the order the splits emitted them (get_out_ids)."""
        return list(self._out_ids)

    @property
    def n_used(self) -> int:
        return self._n_used

    @property
    def seq_id_unq(self) -> tuple[int, ...]:
        return self._get().seq_id_unq

    def seq_pos_min(self, s: int) -> int:
        """Smallest position of sequence s in this batch, -1 if absent."""
        return self._get().seq_pos_min.get(s, -1)

    def seq_pos_max(self, s: int) -> int:
        """Largest position of sequence s in this batch, -1 if absent."""
        return self._get().seq_pos_max.get(s, -1)

    # --- splitting ---------------------------------------------------------------------------
    def split_reset(self) -> None:
        self._out_ids = []
        self._n_used = 0
        self._used = [False] * self.n_tokens

    @staticmethod
    def _check_n_ubatch(n_ubatch: int) -> None:
        if n_ubatch < 1:
            raise ValueError(f"n_ubatch ({n_ubatch}) must be >= 1: raise -ub/--ubatch-size")

    def _take(self, i: int) -> None:
        self._used[i] = True
        self._n_used += 1

    def split_simple(self, n_ubatch: int) -> UBatch | None:
        """Next ubatch: up to n_ubatch unused slots in submission order, sequences mixed freely."""
        self._check_n_ubatch(n_ubatch)
        if self._b is None:
            return None
        n = len(self._used)
        cur = 0
        while cur < n and self._used[cur]:
            cur += 1
        if cur >= n:
            return None
        idxs: list[int] = []
        while cur < n and len(idxs) < n_ubatch:
            idxs.append(cur)
            self._take(cur)
            cur += 1
        return self._ubatch_add(idxs, len(idxs), equal_seqs=False)

    def split_equal(self, n_ubatch: int, sequential: bool, n_keep_tail: int = 0) -> UBatch | None:
        """Next ubatch for per-sequence streams (llama.cpp split_equal): pick sequence sets that
        do not overlap, take the same number of tokens from each (as many as fit in n_ubatch),
        rows grouped by sequence set.  sequential=True requires the chosen seq_ids to be
        consecutive (s, s+1, ...), as llama.cpp does for non-unified caches.

        n_keep_tail > 0: the last n_keep_tail tokens of each set never straddle two ubatches.
        Deviation: llama.cpp can gather n_ubatch + 1 sets (its `> n_ubatch` test); here at most
        n_ubatch sets are taken, so a ubatch never exceeds n_ubatch rows."""
        self._check_n_ubatch(n_ubatch)
        b = self._b
        if b is None:
            return None
        if sequential and b.has_cpl:
            raise BatchError("split_equal: sequential split is not supported when slots belong to several "
                             "sequences (coupled sequences); use a unified KV cache (-kvu/--kv-unified)")
        used = self._used
        sets: list[int] = []
        last_seq = -1
        for i in range(len(used)):
            if used[i] or any(c & b.seq_set[i] for c in sets):
                continue
            if sequential and sets and b.seq_id[i][0] != last_seq + 1:
                continue
            sets.append(b.seq_set[i])
            last_seq = b.seq_id[i][0]
            if len(sets) >= n_ubatch:
                break
        if not sets:
            return None
        lists = [b.seq_set_map[c] for c in sets]
        cur = [0] * len(sets)
        for k, lst in enumerate(lists):
            while used[lst[cur[k]]]:
                cur[k] += 1
        per_set: list[list[int]] = [[] for _ in sets]
        while all(cur[k] < len(lists[k]) for k in range(len(sets))):
            for k, lst in enumerate(lists):
                per_set[k].append(lst[cur[k]])
                self._take(lst[cur[k]])
                cur[k] += 1
            if (len(per_set[0]) + 1) * len(sets) > n_ubatch:
                break
        n_seqs = len(sets)
        if n_keep_tail > 0:
            n_seqs = self._keep_tail(n_ubatch, n_keep_tail, lists, cur, per_set)
        idxs = [i for k in range(n_seqs) for i in per_set[k]]
        return self._ubatch_add(idxs, n_seqs, equal_seqs=True)

    def _keep_tail(self, n_ubatch: int, n_keep_tail: int, lists: list[list[int]],
                   cur: list[int], per_set: list[list[int]]) -> int:
        """split_equal's n_keep_tail rule; returns how many sets stay in the ubatch."""
        if n_ubatch <= n_keep_tail:
            raise ValueError(f"n_ubatch ({n_ubatch}) must exceed n_keep_tail ({n_keep_tail})")

        def remaining(k: int) -> int:
            return len(lists[k]) - cur[k]

        n_keep = 0  # longest prefix of sets that finish here or leave >= n_keep_tail tokens
        while n_keep < len(per_set):
            r = remaining(n_keep)
            if r != 0 and r < n_keep_tail:
                break
            n_keep += 1
        if n_keep == 0:
            idxs = per_set[0]
            if len(idxs) + remaining(0) <= n_ubatch:
                while remaining(0) > 0:
                    idxs.append(lists[0][cur[0]])
                    self._take(lists[0][cur[0]])
                    cur[0] += 1
            else:
                while remaining(0) < n_keep_tail:
                    i = idxs.pop()
                    self._used[i] = False
                    self._n_used -= 1
                    cur[0] -= 1
            n_keep = 1
        for k in range(n_keep, len(per_set)):
            for i in per_set[k]:
                self._used[i] = False
                self._n_used -= 1
        return n_keep

    def split_seq(self, n_ubatch: int) -> UBatch | None:
        """Next ubatch of one sequence set (llama.cpp split_seq): starting at the first unused
        slot, take slots whose set is a subset of the current set, up to n_ubatch."""
        self._check_n_ubatch(n_ubatch)
        b = self._b
        if b is None:
            return None
        used, n = self._used, len(self._used)
        cur = 0
        while cur < n and used[cur]:
            cur += 1
        if cur >= n:
            return None
        cur_set = b.seq_set[cur]
        idxs: list[int] = []
        while True:
            idxs.append(cur)
            self._take(cur)
            if len(idxs) >= n_ubatch:
                break
            cur += 1
            while cur < n and (used[cur] or (cur_set & b.seq_set[cur]) != b.seq_set[cur]):
                cur += 1
            if cur == n:
                break
            cur_set = b.seq_set[cur]
        return self._ubatch_add(idxs, 1, equal_seqs=True)

    def _ubatch_add(self, idxs: list[int], n_seqs: int, equal_seqs: bool) -> UBatch:
        b = self._get()
        self._out_ids.extend(i for i in idxs if b.output[i])
        return UBatch(
            token=tuple(b.token[i] for i in idxs),
            pos=tuple(b.pos[i] for i in idxs),
            seq_id=tuple(b.seq_id[i] for i in idxs),
            output=tuple(b.output[i] for i in idxs),
            idx=tuple(idxs),
            equal_seqs=equal_seqs,
            n_seqs=n_seqs,
        )
