"""--cache-ram (server/ram_cache.py, llama-server's host-memory prompt cache) on SmolLM2: with a
unified cache, an idle slot is saved to host memory and cleared when a request starts on
another slot (its cells freed), and a later request with the same prompt gets those cells back
(only its last token decoded, the same greedy text as the first time); the entries' bytes stay
within --cache-ram (the oldest dropped first, one larger than the limit never saved) and match
the cells copied; /metrics and -v show it (llama-server's debug tags); --cache-ram 0 and
--no-cache-idle-slots turn it off; a bad --cache-ram is refused naming the flag."""
from __future__ import annotations

import logging

import pytest
from server_harness import step_all

from llamapy import Context, ContextParams
from llamapy.memory.seq_state import seq_state_size
from llamapy.sampling import SamplingParams
from llamapy.server.metrics import render_prometheus
from llamapy.server.ram_cache import MiB, make_ram_cache
from llamapy.server.request import Event, Request
from llamapy.server.scheduler import Scheduler

pytestmark = pytest.mark.slow
LONG = ("Once upon a time in a land far away, there lived a brave knight who traveled across mountains and rivers "
        "to find the legendary golden sword hidden deep within the enchanted forest of whispers.")
FOX = "The quick brown fox"


def _sched(model, mib: int = 100, unified: bool = True, idle: bool = True, verbose: bool = False) -> Scheduler:
    params = ContextParams(n_ctx=512, n_batch=256, n_ubatch=256, n_seq_max=2, kv_unified=unified)
    ctx = Context(model, params)
    s = Scheduler(ctx)
    s.ram = make_ram_cache(ctx.memory, mib, params.n_ctx, idle, unified, verbose, s.metrics)
    return s


def _run(s: Scheduler, text: str, id_slot: int = -1, n: int = 4) -> tuple[str, dict]:
    """One greedy request, stepped to its end: (its text, its timings)."""
    evs: list[Event] = []
    r = Request(prompt=s.tok.tokenize(text, add_special=True), max_tokens=n, sampling=SamplingParams(temp=0.0),
                sink=evs.append, ignore_eos=True, id_slot=id_slot)
    s.submit(r)
    step_all(s, [evs])
    assert evs[-1].finish_reason == "length", evs[-1]
    return "".join(e.text for e in evs), evs[-1].timings


def test_clear_and_restore(smollm2) -> None:
    s = _sched(smollm2)
    n_long = len(s.tok.tokenize(LONG, add_special=True))
    text, t = _run(s, LONG, id_slot=0)
    assert t["prompt_n"] == n_long and not s.ram.states  # slot 1 was empty: nothing saved
    held = seq_state_size(s.ctx.memory, 0)
    _run(s, FOX, id_slot=1)  # slot 0 idle: saved to host memory, then cleared (unified cache)
    assert s.slots[0].cache_tokens == [] and s.ctx.memory.seq_pos_max(0) == -1
    assert len(s.ram.states) == 1 and s.ram.size() == held + 4 * (n_long + 3)
    assert s.metrics.prompt_cache_bytes == s.ram.size() and s.metrics.prompt_cache_tokens == n_long + 3
    again, t2 = _run(s, LONG)  # LRU gives slot 0 (empty): the saved cells come back
    assert t2["cache_n"] == n_long - 1 and t2["prompt_n"] == 1
    assert again == text
    n_saved = len(s.ram.states)  # slot 1 (FOX) saved and cleared when slot 0 started
    _, t3 = _run(s, LONG + " The knight finally reached the castle gates.")  # slot 0 kept its cells: no cache update
    assert t3["cache_n"] >= n_long - 1 and len(s.ram.states) == n_saved == 1
    prom = render_prometheus(s.metrics.snapshot())
    assert f"llamacpp:prompt_cache_limit_bytes {100 * MiB}" in prom and "llamacpp:prompt_cache_bytes " in prom


def test_bounded_by_cache_ram(smollm2) -> None:
    s = _sched(smollm2, mib=1)  # SmolLM2: 30 layers x (K 384 + V 384) bytes + 8 = 23048 bytes a token: ~45 tokens
    limit = MiB
    texts = [f"Story number {i}: a cat named Tom{i} sat by the window and watched the rain." for i in range(4)]
    sizes = []
    for i, text in enumerate(texts):
        _run(s, text, id_slot=i % 2)
        sizes.append(s.ram.size())
        assert s.ram.peak <= limit and s.metrics.prompt_cache_bytes == s.ram.size()
    assert max(sizes) > limit // 2 and len(s.ram.states) >= 1  # it did hold entries, and dropped the oldest
    first = s.tok.tokenize(texts[0], add_special=True)
    assert all(e.tokens.tolist()[:len(first)] != first for e in s.ram.states)  # the oldest went first
    big = " ".join(texts)  # ~90 tokens: more than the whole limit
    _run(s, big, id_slot=0)
    before = [e.tokens.size for e in s.ram.states]
    _run(s, FOX, id_slot=1)  # slot 0 (big) idle: too large to save, cleared all the same (llama-server's)
    assert seq_state_size(s.ctx.memory, 0) == 0 and s.ram.peak <= limit
    assert all(e.tokens.size < 80 for e in s.ram.states), (before, [e.tokens.size for e in s.ram.states])


def test_verbose_tags_and_off_switches(smollm2) -> None:
    lines: list[str] = []
    h = logging.Handler()
    h.emit = lambda rec: lines.append(rec.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("llamapy.srv")
    log.addHandler(h)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        s = _sched(smollm2, verbose=True)
        assert "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" in lines
        _run(s, LONG, id_slot=0)
        assert not any("__TEST_TAG_CACHE_IDLE_SLOT__" in x for x in lines)
        _run(s, FOX, id_slot=1)
        assert any("__TEST_TAG_CACHE_IDLE_SLOT__" in x for x in lines)
        lines.clear()
        _run(s, LONG)
        assert "updating prompt cache" in lines and any(x.startswith(" - cache state: ") for x in lines)
        lines.clear()
        off = _sched(smollm2, idle=False, verbose=True)  # --no-cache-idle-slots
        assert "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" not in lines
        _run(off, LONG, id_slot=0), _run(off, FOX, id_slot=1)
        assert not any("__TEST_TAG_CACHE_IDLE_SLOT__" in x for x in lines) and off.slots[0].cache_tokens
        assert _sched(smollm2, mib=0).ram is None  # --cache-ram 0
    finally:
        log.removeHandler(h)
        log.setLevel(old)


def test_split_cache_keeps_idle_slots(smollm2) -> None:
    """Without a unified cache an idle slot is saved but keeps its cells (clearing frees nothing for others)."""
    s = _sched(smollm2, unified=False)
    _run(s, LONG, id_slot=0)
    _run(s, FOX, id_slot=1)
    assert len(s.ram.states) == 1 and s.slots[0].cache_tokens and s.ctx.memory.seq_pos_max(0) >= 0


def test_cache_ram_flag() -> None:
    from llamapy.cli.main import build_parser
    from llamapy.cli.serve import serve_settings

    a = build_parser().parse_args(["serve"])
    st = serve_settings(a)
    assert (st.cache_ram_mib, st.cache_idle_slots) == (8192, True)  # llama-server's defaults
    st = serve_settings(build_parser().parse_args(["serve", "-cram", "-2", "--no-cache-idle-slots"]))
    assert not st.cache_idle_slots
    with pytest.raises(ValueError, match=r"--cache-ram \(-2\) must be >= -1"):
        st.check()
