"""The iteration order of llama.cpp's `std::unordered_map<std::string, llama_token> token_to_id`.

llama.cpp finds EOT/EOM/FIM ids by walking that map and taking the first token whose text is
in a list (e.g. SmolLM2 has both <|endoftext|> and <|im_end|> in the EOT list). The walk
order is libstdc++'s: std::hash<std::string> (_Hash_bytes, a 64-bit MurmurHash2 with seed
0xc70f6907), buckets grown by _Prime_rehash_policy (max_load_factor 1) as the vocabulary is
inserted in id order, and a node list in which a node entering an empty bucket goes to the
front of the list and a node entering a used bucket goes to the front of its bucket's run
(both on insert and on rehash). We replay that, so the pick matches a Linux (gcc) build of
llama.cpp. Only needed when several candidate texts are present.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

_MASK = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
_SEED = 0xC70F6907

# bucket counts of a default-constructed unordered_map grown one insert at a time: it holds
# 13 buckets after the first insert and rehashes to the next count when its size reaches
# the current one (libstdc++'s __prime_list walked by _M_next_bkt, growth factor 2)
BUCKET_CHAIN = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229,
                172933, 351061, 712697, 1447153, 2938679, 5967347)


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def hash_bytes(data: bytes, seed: int = _SEED) -> int:
    """libstdc++'s std::_Hash_bytes for a 64-bit size_t."""
    n = len(data)
    h = (seed ^ (n * _MUL)) & _MASK
    aligned = n & ~7
    for i in range(0, aligned, 8):
        d = (_shift_mix((int.from_bytes(data[i:i + 8], "little") * _MUL) & _MASK) * _MUL) & _MASK
        h = ((h ^ d) * _MUL) & _MASK
    if n & 7:
        h = ((h ^ int.from_bytes(data[aligned:], "little")) * _MUL) & _MASK
    h = (_shift_mix(h) * _MUL) & _MASK
    return _shift_mix(h)


def hash_bytes_many(buf, starts: np.ndarray, lengths: np.ndarray, seed: int = _SEED) -> np.ndarray:
    """hash_bytes of many byte strings at once (buf[starts[i] : starts[i] + lengths[i]]):
    the same MurmurHash2 steps, each applied to every string that has that 8-byte word,
    in numpy uint64 arithmetic (which wraps mod 2^64, as size_t does)."""
    data = np.frombuffer(buf, dtype=np.uint8)
    starts, lengths = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    mul, u = np.uint64(_MUL), np.uint64
    with np.errstate(over="ignore"):
        h = u(seed) ^ (lengths.astype(np.uint64) * mul)
        words = lengths // 8
        for k in range(int(words.max(initial=0))):
            idx = np.nonzero(words > k)[0]
            d = _gather_le(data, starts[idx] + 8 * k, np.full(len(idx), 8)) * mul
            d = (d ^ (d >> u(47))) * mul
            h[idx] = (h[idx] ^ d) * mul
        idx = np.nonzero(lengths & 7)[0]
        if len(idx):
            tail = _gather_le(data, starts[idx] + 8 * words[idx], lengths[idx] & 7)
            h[idx] = (h[idx] ^ tail) * mul
        h = (h ^ (h >> u(47))) * mul
        return h ^ (h >> u(47))


def _gather_le(data: np.ndarray, pos: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The little-endian integer of the n[i] (<= 8) bytes at data[pos[i]:], as uint64."""
    out = np.zeros(len(pos), dtype=np.uint64)
    for j in range(8):
        m = n > j
        if not m.any():
            break
        out[m] |= data[pos[m] + j].astype(np.uint64) << np.uint64(8 * j)
    return out


def unordered_map_order(keys: Iterable[str]) -> list[int]:
    """unordered_map_order_of(hashes) for keys given as strings (hashed in Python)."""
    return unordered_map_order_of(np.array([hash_bytes(k.encode("utf-8")) for k in keys], dtype=np.uint64))


def unordered_map_order_of(hashes: np.ndarray) -> list[int]:
    """Indices of the keys with these std::hash values (inserted in index order, all
    distinct) in the order a libstdc++ unordered_map<std::string, int> iterates them.

    Between two rehashes every node, whether re-inserted by the rehash (walking the old list)
    or newly inserted, follows one rule: into an empty bucket -> list front, else -> front of
    its bucket's run. So the list is the bucket runs ordered by their first arrival, newest
    first, each run newest first: one lexsort per bucket count."""
    n = len(hashes)
    order = np.zeros(0, dtype=np.int64)
    lo = 0
    for n_bkt in BUCKET_CHAIN:
        hi = min(n, n_bkt)                                # size at which the next rehash comes
        seq = np.concatenate([order, np.arange(lo, hi, dtype=np.int64)])  # arrival order
        bkt = (hashes[seq] % np.uint64(n_bkt)).astype(np.int64)
        uniq, first = np.unique(bkt, return_index=True)   # first arrival in each bucket
        first_of = np.empty(n_bkt, dtype=np.int64)
        first_of[uniq] = first
        arrival = np.arange(len(seq), dtype=np.int64)
        order = seq[np.lexsort((-arrival, -first_of[bkt]))]
        lo = hi
        if hi == n:
            return order.tolist()
    raise ValueError(f"{n} keys is past the modelled bucket counts (max {BUCKET_CHAIN[-1]})")
