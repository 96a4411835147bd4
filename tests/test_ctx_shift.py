"""Context shift (--context-shift, --keep, per request n_keep / n_discard) and its absence:
llama-server's n_keep / n_discard numbers; a generation goes on past the slot's size with the
cells consistent; after a shift the model continues exactly as a fresh request whose prompt is
the shifted tokens (K re-rotated by RoPE), on SmolLM2; without it a full slot ends with
finish_reason "length" and truncated, at llama-server's token count; the flags."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from server_harness import asgi_call, serving_state

from llamapy import Context, ContextParams
from llamapy.sampling import SamplingParams
from llamapy.server.ctx_shift import Shift, shift_numbers
from llamapy.server.request import Event, Request
from llamapy.server.scheduler import Scheduler


def _run(s: Scheduler, r: Request, evs: list[Event], max_steps: int = 2000) -> list[int]:
    s.submit(r)
    for _ in range(max_steps):
        if evs and evs[-1].final:
            return [e.token for e in evs if not e.final]
        s.update_slots()
    raise AssertionError("the request did not finish")


def _req(prompt: list[int], max_tokens: int, **kw) -> tuple[Request, list[Event]]:
    evs: list[Event] = []
    return Request(prompt, max_tokens=max_tokens, sampling=SamplingParams(temp=0.0), ignore_eos=True, sink=evs.append, **kw), evs


@pytest.mark.parametrize("args, want", [
    ((255, 256, 226, 0, 0, True), Shift(1, 254, 127)),  # llama-server's defaults on a BOS vocab: BOS kept, half the rest dropped
    ((255, 256, 226, 0, 0, False), Shift(0, 255, 127)),
    ((255, 256, 226, -1, 0, True), Shift(227, 28, 14)),  # n_keep -1: the whole prompt (+ BOS, llama-server's quirk)
    ((255, 256, 250, -1, 0, False), Shift(250, 5, 2)),
    ((255, 256, 255, -1, 0, False), Shift(252, 3, 1)),  # n_keep at most n_ctx - 4
    ((255, 256, 10, 4, 300, False), Shift(4, 251, 250)),  # n_discard within n_left - 1
    ((255, 256, 10, 4, 16, False), Shift(4, 251, 16)),
])
def test_llama_servers_numbers(args, want) -> None:
    assert shift_numbers(*args) == want


def test_generation_goes_past_the_slot(tiny) -> None:
    ctx = Context(tiny, ContextParams(n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, type_k="f32", type_v="f32"))
    s = Scheduler(ctx, ctx_shift=True, n_keep=8)
    prompt = [(7 * i + 3) % 256 for i in range(200)]
    r, evs = _req(prompt, 300)
    toks = _run(s, r, evs)
    assert len(toks) == 300 and evs[-1].finish_reason == "length" and evs[-1].truncated
    slot, mem = s.slots[0], ctx.memory
    n = len(slot.cache_tokens)
    assert n < 256 and mem.seq_pos_min(0) == 0 and mem.seq_pos_max(0) == n - 1 and mem.n_used() == n
    assert slot.cache_tokens[:8] == prompt[:8] and slot.cache_tokens[-5:] == toks[-6:-1]  # kept head, latest tail

    s2 = Scheduler(Context(tiny, ContextParams(n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1)))  # off: llama-server's count
    r, evs = _req(prompt, 300)
    assert len(_run(s2, r, evs)) == 256 - 200 and evs[-1].finish_reason == "length" and evs[-1].truncated
    r, evs = _req(prompt[:20], 5)
    _run(s2, r, evs)
    assert not evs[-1].truncated


def _layer0_k(ctx: Context, seq: int) -> tuple[np.ndarray, torch.Tensor]:
    """The positions of seq's cells, ascending, and layer 0's K rows there (an f32 cache)."""
    kv = ctx.memory
    cells = kv.cells[kv.seq_to_stream(seq)]
    idx = np.flatnonzero(cells.seq[:, seq])
    idx = idx[np.argsort(cells.pos[idx])]
    return cells.pos[idx], kv.k[0][kv.seq_to_stream(seq)][torch.as_tensor(idx)].clone()


@pytest.mark.slow
@pytest.mark.parametrize("n_keep, n_discard", [(None, 0), (-1, 0), (4, 20)])
def test_after_a_shift_the_cells_are_the_shifted_tokens(smollm2, n_keep, n_discard) -> None:
    """After shifts, the cache holds the kept tokens at positions 0..n-1 with the K a fresh
    decode computes there (layer 0: K depends on the token and its position only; deeper layers
    also remember the dropped text, as in llama.cpp); greedy decoding continues as a fresh
    request with those tokens as its prompt does for its first tokens."""
    # deterministic: a row's K does not depend on its ubatch (decoded one at a time here, 64 rows
    # in the fresh run), whichever path the library's timing chose for the coarse types
    # (kernels/calibrate.py: bf16 tiles round per row count), so only the shift differs
    params = ContextParams(n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, type_k="f32", type_v="f32", deterministic=True)
    ctx = Context(smollm2, params)
    s = Scheduler(ctx, ctx_shift=True)
    n = s.slots[0].n_ctx
    prompt = smollm2.tokenize("The history of the Roman Empire spans many centuries. It began when", add_special=True)
    r, evs = _req(prompt, n - len(prompt) + 60, n_keep=n_keep, n_discard=n_discard)
    toks = _run(s, r, evs)
    i = n - len(prompt)  # the first shift comes after token i: the cache then holds prompt + toks[:i-1] (n - 1 tokens)
    held = prompt + toks[: i - 1]
    sh = shift_numbers(len(held), n, len(prompt), 0 if n_keep is None else n_keep, n_discard, smollm2.tokenizer.add_bos)
    assert sh.n_discard > 0
    cached = s.slots[0].cache_tokens
    pos, k = _layer0_k(ctx, 0)
    assert pos.tolist() == list(range(len(cached)))

    fresh = Scheduler(Context(smollm2, params))
    r, evs = _req(cached, 1)
    _run(fresh, r, evs)
    pos2, k2 = _layer0_k(fresh.ctx, 0)
    assert pos2.tolist() == pos.tolist()
    torch.testing.assert_close(k, k2, rtol=1e-4, atol=1e-4)

    if len(toks) - i < sh.n_discard:  # one shift in all: check the tokens right after it
        shifted = held[: sh.n_keep] + held[sh.n_keep + sh.n_discard:]
        again = Scheduler(Context(smollm2, params))
        r, evs = _req(shifted + [toks[i - 1]], 3)
        assert _run(again, r, evs) == toks[i: i + 3]


@pytest.mark.slow
def test_http_ctx_shift_on_and_off(smollm2) -> None:
    """llama.cpp's test_ctx_shift: n_ctx 512 over 2 slots, a 226-token-ish prompt."""
    text = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore "
            "magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo "
            "consequat. Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur.")
    with serving_state(smollm2, n_ctx=512, np_=2) as st:
        n_prompt = len(asgi_call(st, "POST", "/tokenize", json={"content": text, "add_special": True}).json()["tokens"])
        assert 100 < n_prompt < 250
        body = {"prompt": text, "n_predict": 96 + (256 - n_prompt), "ignore_eos": True, "temperature": 0}
        r = asgi_call(st, "POST", "/completion", json=body).json()
        assert r["truncated"] is True and r["stop_type"] == "limit" and r["tokens_predicted"] == 256 - n_prompt
        r = asgi_call(st, "POST", "/completion", json={**body, "n_predict": 4}).json()
        assert r["truncated"] is False and r["tokens_predicted"] == 4
        st.scheduler.ctx_shift = True
        r = asgi_call(st, "POST", "/completion", json=body).json()
        assert r["truncated"] is True and r["tokens_predicted"] == body["n_predict"]
        r = asgi_call(st, "POST", "/v1/completions", json={"prompt": text, "max_tokens": 300, "ignore_eos": True, "n_keep": -1}).json()
        assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 300


def test_flags() -> None:
    from llamapy.cli import build_parser
    from llamapy.cli.serve import serve_settings

    def settings(*flags: str):
        return serve_settings(build_parser().parse_args(["serve", *flags]))

    assert (settings().ctx_shift, settings().n_keep) == (False, 0)
    assert settings("--context-shift").ctx_shift and settings("--ctx-shift").ctx_shift
    assert not settings("--ctx-shift", "--no-context-shift").ctx_shift
    assert settings("--keep", "-1").n_keep == -1
    with pytest.raises(ValueError, match="--keep"):
        settings("--keep", "-2").check()
