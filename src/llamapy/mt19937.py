"""The random numbers llama.cpp's samplers draw: `std::mt19937(seed)` and
`std::uniform_real_distribution<double>(0, 1)` as libstdc++ builds it.

With the same seed, the same sampler chain and the same candidates, a draw lands on the same
token as llama.cpp's `dist` sampler (llama-sampler.cpp), so a seeded request's text follows
llama-server's for as long as the logits agree to within the sampled gaps.

numpy's legacy `RandomState` seeds its MT19937 with Matsumoto-Nishimura's init_genrand, which
is also std::mt19937's seeding (`RandomState.seed`: ~1.5 us, so a request re-seeds one
generator); `randint(0, 2**32, dtype=uint64)` is then the engine's 32-bit outputs in order
(a range of 2^32 takes each output as it is, no rejection), drawn _BATCH at a time: a stream
read ahead is the same stream, and re-seeding drops what was read ahead.  A
double is libstdc++'s `generate_canonical<double, 53>`: two outputs, `(x0 + x1 * 2^32) / 2^64`
(one rounding to double), and a result that rounds to 1.0 becomes the largest double below 1.
"""

from __future__ import annotations

import math

import numpy as np

_TWO_64 = float(1 << 64)
_BELOW_ONE = math.nextafter(1.0, 0.0)
_BATCH = 256  # outputs drawn per call into numpy


class MT19937:
    """One sampler's RNG stream (llama_sampler_dist's `rng`)."""

    def __init__(self, seed: int = 5489) -> None:  # 5489: std::mt19937's default seed
        self._check(seed)
        self._rs = np.random.RandomState(seed)
        self._ahead: list[int] = []  # outputs read ahead, next last

    @staticmethod
    def _check(seed: int) -> None:
        if not 0 <= seed <= 0xFFFFFFFF:
            raise ValueError(f"seed ({seed}) must be in [0, 2^32-1]")

    def seed(self, seed: int) -> None:
        """Restart the stream as `std::mt19937 rng(seed)` (seed in [0, 2^32-1])."""
        self._check(seed)
        self._rs.seed(seed)
        self._ahead.clear()

    def next_u32(self) -> int:
        """The engine's next 32-bit output (`rng()`)."""
        if not self._ahead:
            self._ahead = self._rs.randint(0, 1 << 32, size=_BATCH, dtype=np.uint64).tolist()[::-1]
        return self._ahead.pop()

    def uniform(self) -> float:
        """`std::uniform_real_distribution<double>(0.0, 1.0)(rng)`: a double in [0, 1)."""
        lo = self.next_u32()
        hi = self.next_u32()
        u = (lo + (hi << 32)) / _TWO_64  # exact integer, one rounding, as libstdc++'s double sum
        return _BELOW_ONE if u >= 1.0 else u
