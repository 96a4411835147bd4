"""Scheduler on the tiny model, stepped synchronously (no thread, no HTTP)."""
from __future__ import annotations

import pytest

from llamapy import Context, ContextParams
from llamapy.sampling import SamplingParams
from llamapy.server.request import Event, Request
from llamapy.server.scheduler import Scheduler
from llamapy.server.slots import PromptTooLongError, SlotState


def _sched(tiny, n_ctx=1024, np_=4, n_batch=32, unified=False) -> Scheduler:
    ctx = Context(tiny, ContextParams(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_seq_max=np_, kv_unified=unified, type_k="f32", type_v="f32"))
    return Scheduler(ctx)


def _req(prompt: list[int], max_tokens: int = 8, stop: list[str] | None = None, ignore_eos: bool = True) -> tuple[Request, list[Event]]:
    events: list[Event] = []
    r = Request(prompt=prompt, max_tokens=max_tokens, sampling=SamplingParams(temp=0.0), stop=stop or [], sink=events.append, ignore_eos=ignore_eos)
    return r, events


def _prompt(n: int, seed: int = 0) -> list[int]:
    return [(7 * i + 13 * seed + 3) % 256 for i in range(n)]


def _run(s: Scheduler, evs: list[list[Event]], max_steps: int = 500) -> None:
    for _ in range(max_steps):
        if all(e and e[-1].final for e in evs):
            return
        s.update_slots()
    raise AssertionError("requests did not finish")


def _tokens(ev: list[Event]) -> list[int]:
    return [e.token for e in ev if not e.final]


def test_chunked_prefill_gen_first_within_n_batch(tiny):
    s = _sched(tiny, n_batch=32)
    a, ea = _req(_prompt(5), max_tokens=40)
    s.submit(a)
    s.update_slots()
    assert [r.pos for r in s.last_batch] == [0, 1, 2, 3]  # the prompt's last token waits for a step of its own
    assert s.slots[0].state is SlotState.PREFILLING
    s.update_slots()
    assert [(r.pos, r.kind) for r in s.last_batch] == [(4, "prompt")]
    assert s.slots[0].state is SlotState.GENERATING
    b, eb = _req(_prompt(100, 1), max_tokens=2)
    s.submit(b)
    n_prefill_steps = 0
    while not eb:
        s.update_slots()
        rows = s.last_batch
        assert 0 < len(rows) <= 32
        kinds = [r.kind for r in rows]
        assert kinds == sorted(kinds, key=lambda k: k != "gen"), "decode tokens must come before prompt chunks"
        if "prompt" in kinds:
            n_prefill_steps += 1
            if not ea[-1].final:
                assert rows[0] == rows[0].__class__(0, rows[0].pos, "gen")  # A never stalls
    assert n_prefill_steps == -(-99 // 31) + 1  # 31 prompt rows fit beside A's one token; the last token alone


def _probs_run(s: Scheduler, prompt: list[int]) -> list[tuple[int, tuple]]:
    r, ev = _req(prompt, max_tokens=12)
    r.sampling, r.n_probs = SamplingParams(temp=0.8, seed=4242), 10
    s.submit(r)
    _run(s, [ev])
    return [(e.token, tuple(e.probs)) for e in ev if not e.final]


def test_cached_prompt_gives_the_uncached_requests_probs_bit_for_bit(smollm2):
    """llama.cpp's test_n_probs_post_backend_sampling: the same seeded request twice, the second
    a full prompt-cache hit (only the last prompt token re-decoded), gives the same tokens and
    probabilities exactly: the prompt's last token is decoded alone either way (step_batch's
    contract), since a 1-row product rounds unlike the prompt's many-row one."""
    ctx = Context(smollm2, ContextParams(n_ctx=512, n_batch=64, n_ubatch=64, n_seq_max=1))
    s = Scheduler(ctx)
    prompt = smollm2.tokenize("The countries of Europe, in random order, are:")
    assert len(prompt) > 4
    first = _probs_run(s, prompt)
    again = _probs_run(s, prompt)
    assert s.slots[0].n_cached == len(prompt) - 1  # the hit: all but the last token reused
    assert again == first


def test_queue_beyond_slots(tiny):
    s = _sched(tiny, np_=2)
    reqs = [_req(_prompt(10 + i, i), max_tokens=3) for i in range(5)]
    for r, _ in reqs:
        s.submit(r)
    s.update_slots()
    assert sum(not sl.is_idle for sl in s.slots) == 2
    assert len(s.waiting) == 3
    assert s.snapshot()[1]["n_requests_deferred"] == 3
    _run(s, [e for _, e in reqs])
    assert all(e[-1].finish_reason in ("length", "stop") for _, e in reqs)
    assert not s.waiting


def test_cancel_frees_cells(tiny):
    s = _sched(tiny, np_=2)
    a, ea = _req(_prompt(20), max_tokens=100)
    b, eb = _req(_prompt(12, 3), max_tokens=100)
    s.submit(a), s.submit(b)
    for _ in range(3):
        s.update_slots()
    used_before = s.ctx.memory.n_used()
    slot_a = next(sl for sl in s.slots if sl.request is a)
    n_a = len(slot_a.cache_tokens)
    assert n_a >= 20 and not ea[-1].final
    s.cancel(a.id)
    s.update_slots()
    assert ea[-1].final and ea[-1].finish_reason == "abort"
    assert slot_a.is_idle and slot_a.cache_tokens == []
    assert s.ctx.memory.seq_pos_max(slot_a.id) == -1
    assert s.ctx.memory.n_used() <= used_before - n_a + 1  # b may have grown by one token


def test_prompt_too_long_message(tiny):
    s = _sched(tiny, n_ctx=1024, np_=4)
    r, _ = _req(_prompt(300))
    with pytest.raises(PromptTooLongError) as ei:
        s.submit(r)
    assert str(ei.value) == ("request (300 tokens) exceeds the available context size (256 tokens), try increasing it: "
                             "each of the 4 slots holds 256 (-c 1024 / -np 4); use --kv-unified or a larger -c")
    assert (ei.value.n_prompt_tokens, ei.value.n_ctx) == (300, 256)
    su = _sched(tiny, n_ctx=1024, np_=4, unified=True)
    su.submit(r)  # fits the unified cache


def test_prefix_reuse_same_output(tiny):
    s = _sched(tiny, np_=1)
    p = _prompt(40)
    r1, e1 = _req(p, max_tokens=4)
    s.submit(r1)
    _run(s, [e1])
    n_proc = s.metrics.n_prompt_tokens_processed_total
    p2 = p[:30] + _prompt(10, 5)
    r2, e2 = _req(p2, max_tokens=6)
    s.submit(r2)
    _run(s, [e2])
    assert e2[-1].usage.prompt_tokens_cached == 30
    assert s.metrics.n_prompt_tokens_processed_total - n_proc == 10
    fresh = _sched(tiny, np_=1)
    r3, e3 = _req(p2, max_tokens=6)
    fresh.submit(r3)
    _run(fresh, [e3])
    assert _tokens(e2) == _tokens(e3)


def test_context_end_is_length(tiny):
    s = _sched(tiny, n_ctx=1024, np_=4)  # 256 cells per slot
    r, ev = _req(_prompt(250), max_tokens=-1)
    s.submit(r)
    _run(s, [ev])
    assert ev[-1].finish_reason == "length" and ev[-1].truncated
    # llama-server's: it stops once tokens + 1 >= n_ctx (one cell kept free, for a context shift):
    # 250 + 6 = 256 tokens, the last one needing no cell
    assert ev[-1].usage.completion_tokens == 256 - 250
    assert s.ctx.memory.seq_pos_max(s.slots[0].id) == 254


@pytest.mark.parametrize("unified", [False, True])
def test_batched_equals_alone(tiny, unified):
    prompts = [_prompt(n, i) for i, n in enumerate((3, 45, 17, 70))]
    alone = []
    for p in prompts:
        s = _sched(tiny, np_=4, unified=unified)
        r, e = _req(p, max_tokens=4)
        s.submit(r)
        _run(s, [e])
        alone.append(_tokens(e))
    s = _sched(tiny, np_=4, unified=unified)
    reqs = [_req(p, max_tokens=4) for p in prompts]
    for r, _ in reqs:
        s.submit(r)
    _run(s, [e for _, e in reqs])
    assert [_tokens(e) for _, e in reqs] == alone


def test_stop_string_cuts_text(tiny):
    """Greedy, EOS ignored, a fixed prompt: the same 12 tokens every run, whose text (the tiny
    model's "9aaaaa...") is long enough to take a stop string from; a shorter one is a failure."""
    s = _sched(tiny, np_=1)
    r, e = _req(_prompt(10), max_tokens=12)
    s.submit(r)
    _run(s, [e])
    text = "".join(x.text for x in e)
    assert e[-1].usage.completion_tokens == 12 and len(text) >= 4, (e[-1], text)
    stop = text[2:4]
    s2 = _sched(tiny, np_=1)
    r2, e2 = _req(_prompt(10), max_tokens=12, stop=[stop])
    s2.submit(r2)
    _run(s2, [e2])
    assert e2[-1].finish_reason == "stop"
    assert "".join(x.text for x in e2) == text[: text.index(stop)]


def test_unified_cache_full_ends_one_request_cleanly(tiny):
    s = _sched(tiny, n_ctx=256, np_=2, n_batch=64, unified=True)
    reqs = [_req(_prompt(124, i), max_tokens=16) for i in range(2)]
    for r, _ in reqs:
        s.submit(r)
    _run(s, [e for _, e in reqs])
    finals = sorted((e[-1] for _, e in reqs), key=lambda f: f.usage.completion_tokens)
    assert [f.finish_reason for f in finals] == ["error", "length"]  # as llama-server: an error, not a short reply
    assert finals[0].error.startswith("Context size has been exceeded: ") and "kv_cache full: a ubatch needs" in finals[0].error
    assert finals[0].usage.completion_tokens < 16  # cut when the shared cache filled
    assert finals[1].error == "" and finals[1].usage.completion_tokens == 16  # the other went on in the freed cells
    assert s.ctx.memory.n_used() <= 256


@pytest.mark.parametrize("sps", [0.5, 0.0])
def test_interleaved_conversations_keep_their_slots(tiny, sps):
    """Three conversations sharing their first 8 tokens (a chat template's start), turn after
    turn in turn on 4 slots: with llama-server's -sps 0.5 each returns to its own slot and
    finds its whole previous turn cached.  With -sps 0 (the longest prefix however short) a
    new conversation takes the slot of one that shares only those 8 tokens and evicts it."""
    s = _sched(tiny)
    s.slot_prompt_similarity = sps
    head = _prompt(8, seed=9)
    convs = [head + _prompt(24, seed=c) for c in range(3)]
    cached = []
    for turn in range(3):
        for c in range(3):
            r, ev = _req(convs[c], max_tokens=4)
            s.submit(r)
            _run(s, [ev])
            cached.append((turn, ev[-1].usage.prompt_tokens_cached, len(convs[c])))
            convs[c] = convs[c] + _tokens(ev) + _prompt(6, seed=10 + turn)
    later = [(n, p) for t, n, p in cached if t > 0]
    if sps == 0.5:
        assert all(n >= p - 6 - 4 for n, p in later)  # all but the new user tokens (and the last reply)
    else:
        assert any(n <= 8 for n, _ in later)
