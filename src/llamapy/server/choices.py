"""n > 1 (llama-server's n_cmpl, alias n) on /v1/completions and /v1/chat/completions: one
request per choice through the slots, as llama-server's child tasks (tools/server/server-task.h
add_child): choice j samples with seed + j (mod 2^32) unless the seed is the random default,
where every choice draws its own.  A streamed reply interleaves the choices' chunks as they
come, each with its choice index; the reply's usage counts the prompt once and every choice's
completion tokens."""
from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, AsyncIterator, TypeVar

from ..sampling import LLAMA_DEFAULT_SEED, SamplingParams
from .api_error import APIError
from .request import Usage

T = TypeVar("T")


def check_n(n: int, n_slots: int) -> None:
    """n_cmpl's limits, 1..the slots (-np): a 400 naming both."""
    if not 1 <= n <= n_slots:
        raise APIError(400, f"n ({n}) must be between 1 and the server's {n_slots} slots (-np)")


def choice_sampling(s: SamplingParams, j: int) -> SamplingParams:
    """Choice j's sampling: server_task::add_child's seed + j, the random default kept."""
    if j == 0 or s.seed == LLAMA_DEFAULT_SEED:
        return s
    return replace(s, seed=(s.seed + j) % (1 << 32))


def summed_usage(usages: list[Usage | None]) -> Usage | None:
    """The prompt once (the first choice's, cached tokens too), the completions summed."""
    if not usages or usages[0] is None:
        return None
    first = usages[0]
    return Usage(prompt_tokens=first.prompt_tokens, prompt_tokens_cached=first.prompt_tokens_cached,
                 completion_tokens=sum(u.completion_tokens for u in usages if u is not None))


async def interleave(gens: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """(i, item) from every generator as each produces them, until all end; an exception in
    one ends the whole (the others are cancelled)."""
    if len(gens) == 1:
        async for x in gens[0]:
            yield 0, x
        return
    queue: asyncio.Queue[tuple[int, Any, BaseException | None, bool]] = asyncio.Queue()

    async def pump(i: int, g: AsyncIterator[T]) -> None:
        try:
            async for x in g:
                await queue.put((i, x, None, False))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, re-raised there
            await queue.put((i, None, e, True))
            return
        await queue.put((i, None, None, True))

    tasks = [asyncio.create_task(pump(i, g)) for i, g in enumerate(gens)]
    try:
        left = len(gens)
        while left:
            i, x, err, done = await queue.get()
            if err is not None and not isinstance(err, asyncio.CancelledError):
                raise err
            if done:
                left -= 1
                continue
            yield i, x
    finally:
        for t in tasks:
            t.cancel()
