"""serve's --cache-ram in the memory model (memory/cache_ram.py): a saved prompt's bytes are the
estimate's bytes a token times its tokens (exactly, for a cache without a sliding window); the
entries never exceed the bound, with a limit and with -1 (n_ctx tokens + one entry); `llamapy
mem --cache-ram N` counts it and checks it against --mem-budget; the server lowers a default
limit the budget cannot hold (logged) and refuses one the user gave against a --mem-budget the
user gave, naming the numbers and the flags."""
from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from server_harness import step_all

from llamapy import Context, ContextParams
from llamapy.memory.cache_ram import CacheRamBudgetError, cache_ram_estimate, state_bytes_per_token
from llamapy.sampling import SamplingParams
from llamapy.server.ram_cache import MiB, make_ram_cache, resolve_cache_ram
from llamapy.server.request import Event, Request
from llamapy.server.scheduler import Scheduler

pytestmark = pytest.mark.slow
TEXTS = ["Once upon a time in a land far away, there lived a brave knight who traveled across mountains",
         "The quick brown fox jumps over the lazy dog while the farmer watches from the porch of his house",
         "In the beginning the universe was created. This has made a lot of people very angry",
         "It was the best of times, it was the worst of times, it was the age of wisdom and of foolishness",
         "Call me Ishmael. Some years ago, never mind how long precisely, having little money in my purse"]


def _sched(model, mib: int, n_ctx: int = 256, n_seq: int = 2) -> Scheduler:
    params = ContextParams(n_ctx=n_ctx, n_batch=128, n_ubatch=128, n_seq_max=n_seq, kv_unified=True)
    ctx = Context(model, params)
    s = Scheduler(ctx)
    s.ram = make_ram_cache(ctx.memory, mib, params.n_ctx, True, True, False, s.metrics)
    return s


def _run(s: Scheduler, text: str, n: int = 8) -> None:
    evs: list[Event] = []
    s.submit(Request(prompt=s.tok.tokenize(text, add_special=True), max_tokens=n, sampling=SamplingParams(temp=0.0),
                     sink=evs.append, ignore_eos=True))
    step_all(s, [evs])
    assert evs[-1].finish_reason == "length", evs[-1]


def test_saved_bytes_are_the_estimate(smollm2) -> None:
    """Each entry holds exactly state_bytes_per_token a token (SmolLM2: one cache, no window)."""
    s = _sched(smollm2, mib=100)
    bpt = state_bytes_per_token(s.ctx.estimate)
    for t in TEXTS[:3]:
        _run(s, t, n=2)
    assert len(s.ram.states) >= 1
    for e in s.ram.states:
        assert e.size() == e.tokens.size * bpt, (e.size(), e.tokens.size, bpt)


def test_no_limit_bounded_by_n_ctx(smollm2) -> None:
    """--cache-ram -1: the entries' bytes never pass (n_ctx + n_ctx_seq) tokens' worth, and the
    bound is not loose by more than the one entry it allows for."""
    s = _sched(smollm2, mib=-1, n_ctx=256, n_seq=2)
    c = cache_ram_estimate(s.ctx.estimate, -1)
    for t in TEXTS + [x[::-1] for x in TEXTS[:3]]:  # eight prompts of ~60-70 tokens into 256 tokens' worth
        _run(s, t, n=40)
    assert s.ram.peak <= c.bound, (s.ram.peak, c.bound)
    assert s.ram.n_tokens() <= c.n_ctx
    assert s.ram.peak > (c.n_ctx // 2) * c.bytes_per_token  # it did fill up: the check above meant something


def test_resolve_against_the_budget(smollm2, caplog) -> None:
    ctx = Context(smollm2, ContextParams(n_ctx=256, n_seq_max=1))
    total = ctx.estimate.total
    budget_mib = (total + 64 * MiB) / MiB
    assert resolve_cache_ram(ctx, 32, True, budget_mib) == 32  # fits: unchanged
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        assert resolve_cache_ram(ctx, 8192, False, budget_mib) == 64  # the default, lowered to what is left
    assert "lowered to 64 MiB" in caplog.text and "--mem-budget" in caplog.text
    with pytest.raises(CacheRamBudgetError, match=r"--cache-ram 100 holds up to 100\.00 MiB.*leaving 64\.00 MiB: lower --cache-ram to 64"):
        resolve_cache_ram(ctx, 100, True, budget_mib)
    assert resolve_cache_ram(ctx, 0, True, 1.0) == 0  # off: nothing to fit
    assert 0 < resolve_cache_ram(ctx, 10**8, True, 0.0) < 10**8  # no --mem-budget: free memory bounds it, lowered


def _mem(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamapy", "mem", "-m", "smollm2-135m", "-c", "1024", *args],
                          capture_output=True, text=True, timeout=120)


def test_mem_counts_cache_ram() -> None:
    plain = json.loads(_mem("--json").stdout)
    assert plain["prompt_cache"] is None
    j = json.loads(_mem("--json", "--cache-ram", "-1").stdout)
    bpt = j["prompt_cache"]["bytes_per_token"]
    per_cell = sum(c["bytes_per_token"] for c in j["caches"])
    assert bpt == per_cell + 8 * len(j["caches"]) + 4
    assert j["prompt_cache"]["bound"] == (1024 + 1024) * bpt  # -np 1: one entry may be the whole context
    tot = plain["total"] / MiB
    fits = _mem("--cache-ram", "100", "--mem-budget", f"{tot + 101:.2f}")
    assert "with the prompt cache's 100.00 MiB" in fits.stdout and f"with the prompt cache up to {tot + 100:.2f} MiB" in fits.stdout
    over = _mem("--cache-ram", "100", "--mem-budget", f"{tot + 50.5:.2f}")  # (.2f may round a budget of tot + 50 down to 49.99x)
    assert "the prompt cache does NOT" in over.stdout and "lower --cache-ram to 50 or less" in over.stdout
    bad = _mem("--cache-ram", "-2")
    assert bad.returncode != 0 and "--cache-ram (-2) must be >= -1" in bad.stderr


def test_serve_flag_given_or_default() -> None:
    from llamapy.cli.main import build_parser
    from llamapy.cli.serve import serve_settings

    st = serve_settings(build_parser().parse_args(["serve"]))
    assert (st.cache_ram_mib, st.cache_ram_given) == (8192, False)
    st = serve_settings(build_parser().parse_args(["serve", "--cache-ram", "8192"]))
    assert (st.cache_ram_mib, st.cache_ram_given) == (8192, True)
