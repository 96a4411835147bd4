"""SeqPos: the multiset of positions one sequence holds in a KV-cache stream, with cheap
min/max.  llama.cpp keeps a std::set of (pos, cell) per sequence; here a count per position
(authoritative) plus a min-heap and a max-heap of positions with lazy deletion: a heap top
whose position is no longer counted is popped when met.  add/remove are O(1) amortised
(O(log n) when a new position appears), min/max O(log n) amortised."""
from __future__ import annotations

import heapq

import numpy as np


class SeqPos:
    __slots__ = ("count", "_lo", "_hi")

    def __init__(self) -> None:
        self.count: dict[int, int] = {}
        self._lo: list[int] = []  # min-heap of positions (may hold stale ones)
        self._hi: list[int] = []  # min-heap of -positions (may hold stale ones)

    def __len__(self) -> int:
        return len(self.count)

    def copy(self) -> "SeqPos":
        res = SeqPos()
        res.count = dict(self.count)
        res._lo, res._hi = list(self._lo), list(self._hi)
        return res

    def clear(self) -> None:
        self.count.clear()
        self._lo.clear()
        self._hi.clear()

    def _push_new(self, new: list[int]) -> None:
        """Index positions that just appeared in `count`."""
        if len(self._lo) > 2 * len(self.count) + 64:  # too many stale entries: rebuild
            self._lo = list(self.count)
            self._hi = [-p for p in self._lo]
            heapq.heapify(self._lo)
            heapq.heapify(self._hi)
        elif len(new) > 64:
            self._lo.extend(new)
            self._hi.extend(-p for p in new)
            heapq.heapify(self._lo)
            heapq.heapify(self._hi)
        else:
            for p in new:
                heapq.heappush(self._lo, p)
                heapq.heappush(self._hi, -p)

    def add(self, p: int) -> None:
        c = self.count.get(p, 0)
        self.count[p] = c + 1
        if c == 0:
            self._push_new([p])

    def remove(self, p: int, n: int = 1) -> None:
        c = self.count.get(p, 0) - n
        if c < 0:
            raise AssertionError(f"SeqPos: removing position {p} {n} times but it is held {c + n} times")
        if c == 0:
            del self.count[p]
        else:
            self.count[p] = c

    def add_many(self, ps: np.ndarray) -> None:
        if ps.size == 0:
            return
        vals, cnts = np.unique(ps, return_counts=True)
        new = []
        for p, c in zip(vals.tolist(), cnts.tolist()):
            old = self.count.get(p, 0)
            self.count[p] = old + c
            if old == 0:
                new.append(p)
        self._push_new(new)

    def remove_many(self, ps: np.ndarray) -> None:
        if ps.size == 0:
            return
        vals, cnts = np.unique(ps, return_counts=True)
        for p, c in zip(vals.tolist(), cnts.tolist()):
            self.remove(p, c)

    def min(self) -> int:
        """Smallest position held, -1 when empty."""
        lo, count = self._lo, self.count
        while lo and lo[0] not in count:
            heapq.heappop(lo)
        return lo[0] if lo else -1

    def max(self) -> int:
        """Largest position held, -1 when empty."""
        hi, count = self._hi, self.count
        while hi and -hi[0] not in count:
            heapq.heappop(hi)
        return -hi[0] if hi else -1
