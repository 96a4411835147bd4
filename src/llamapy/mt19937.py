"""The random numbers llama.cpp's samplers draw: `std::mt19937(seed)` and
`std::uniform_real_distribution<double>(0, 1)` as libstdc++ builds it.

With the same seed, the same sampler chain and the same candidates, a draw lands on the same
token as llama.cpp's `dist` sampler (llama-sampler.cpp), so a seeded request's text follows
llama-server's for as long as the logits agree to within the sampled gaps.

numpy's MT19937 seeded the legacy way (`RandomState(seed)`, Matsumoto-Nishimura's
init_genrand, which is also std::mt19937's seeding) gives the engine's 32-bit outputs.  A
double is libstdc++'s `generate_canonical<double, 53>`: two outputs, `(x0 + x1 * 2^32) / 2^64`
(one rounding to double), and a result that rounds to 1.0 becomes the largest double below 1.
"""

from __future__ import annotations

import math

import numpy as np

_TWO_64 = float(1 << 64)
_BELOW_ONE = math.nextafter(1.0, 0.0)


class MT19937:
    """One sampler's RNG stream (llama_sampler_dist's `rng`)."""

    def __init__(self, seed: int = 5489) -> None:  # 5489: std::mt19937's default seed
        self._bits = np.random.MT19937()
        self.seed(seed)

    def seed(self, seed: int) -> None:
        """Restart the stream as `std::mt19937 rng(seed)` (seed in [0, 2^32-1])."""
        if not 0 <= seed <= 0xFFFFFFFF:
            raise ValueError(f"seed ({seed}) must be in [0, 2^32-1]")
        self._bits.state = np.random.RandomState(seed).get_state(legacy=False)

    def next_u32(self) -> int:
        """The engine's next 32-bit output (`rng()`)."""
        return int(self._bits.random_raw())

    def uniform(self) -> float:
        """`std::uniform_real_distribution<double>(0.0, 1.0)(rng)`: a double in [0, 1)."""
        lo, hi = (int(x) for x in self._bits.random_raw(2))
        u = (lo + (hi << 32)) / _TWO_64  # exact integer, one rounding, as libstdc++'s double sum
        return _BELOW_ONE if u >= 1.0 else u
