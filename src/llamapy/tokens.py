"""Token-list helpers shared by the decode loops (generate.py, server/), the prompt caches
(the CLI's, the server's slots) and the draft sources (speculative/).  It imports nothing
of llamapy, so every one of those can depend on it."""
from __future__ import annotations


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (the reusable cached part)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
