"""ngram-simple (llama.cpp common/ngram-map.cpp common_ngram_simple_draft): the last size_n
tokens (ending with the one just sampled) looked up in the sequence so far, latest match
first; the up to size_m tokens that followed it are the draft.  No second model."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class NgramSimple:
    size_n: int = 12  # --spec-ngram-simple-size-n: the n-gram looked up
    size_m: int = 48  # --spec-ngram-simple-size-m: the m-gram drafted after a match

    def draft(self, tokens: list[int], n_max: int) -> list[int]:
        """tokens: the sequence so far, its last one the token just sampled (not yet in the
        cache).  Returns at most min(n_max, size_m) tokens; none without a match, or when the
        sequence is shorter than size_n + size_m + 2, or the match leaves fewer than size_n
        tokens to copy (llama.cpp's conditions)."""
        hist, sampled = tokens[:-1], tokens[-1]
        n, cur = self.size_n, len(tokens) - 1
        if n_max <= 0 or cur <= n + self.size_m + 1:
            return []
        arr = np.asarray(hist, dtype=np.int64)  # [cur]
        pattern = np.asarray(hist[cur - n + 1 :] + [sampled], dtype=np.int64)  # [n]
        # windows starting at 1 .. cur - n - 1 (position 0 means no match, as in llama.cpp)
        win = np.lib.stride_tricks.sliding_window_view(arr[: cur - 1], n)[1:]  # [cur - n - 1, n]
        hits = np.flatnonzero((win == pattern).all(axis=1))
        if hits.size == 0:
            return []
        match = int(hits[-1]) + 1  # the latest match
        copy = min(self.size_m, cur - (match + n))
        if copy < n:
            return []
        return [int(t) for t in arr[match + n : match + n + min(copy, n_max)]]

    def accepted(self, tokens: list[int]) -> None:
        """Nothing to undo: the lookup keeps no state."""
