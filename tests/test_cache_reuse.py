"""--cache-reuse N (and a request's n_cache_reuse): text cut out of a cached prompt; the chunk
after the cut is shifted into place instead of decoded again (llama-server's chunk search),
the cells end up as a fresh decode of the new prompt puts them (layer 0's K, SmolLM2);
too-short chunks and an unset option reuse nothing past the common prefix.  Also --props
(POST /props) and the accepted -cb/--cont-batching."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from server_harness import asgi_call, serving_state

from llamapy import Context, ContextParams
from llamapy.sampling import SamplingParams
from llamapy.server.request import Event, Request
from llamapy.server.scheduler import Scheduler


def _run(s: Scheduler, prompt: list[int], n: int, **kw) -> list[Event]:
    evs: list[Event] = []
    s.submit(Request(prompt, max_tokens=n, sampling=SamplingParams(temp=0.0), ignore_eos=True, sink=evs.append, **kw))
    while not (evs and evs[-1].final):
        s.update_slots()
    return evs


def _layer0_k(ctx: Context, seq: int) -> tuple[list[int], torch.Tensor]:
    kv = ctx.memory
    cells = kv.cells[kv.seq_to_stream(seq)]
    idx = np.flatnonzero(cells.seq[:, seq])
    idx = idx[np.argsort(cells.pos[idx])]
    return cells.pos[idx].tolist(), kv.k[0][kv.seq_to_stream(seq)][torch.as_tensor(idx)].clone()


@pytest.mark.slow
def test_a_cut_out_chunk_is_shifted_into_place(smollm2) -> None:
    tok = lambda t: smollm2.tokenize(t, add_special=False)  # noqa: E731
    x = tok("Notes on the garden. The roses bloom in June and the")
    d = tok(" tulips, which came from a market in Amsterdam last spring, open in April; the")
    y = tok(" apple trees flower in May, and the pears follow a week later when the weather is warm")
    # deterministic: a row's K does not depend on how many rows shared its ubatch (49 here, 29 in
    # the fresh run), whichever path the library's timing chose for the coarse types
    # (kernels/calibrate.py: bf16 tiles round differently per row count), so only the shift differs
    params = ContextParams(n_ctx=512, n_batch=64, n_ubatch=64, n_seq_max=1, type_k="f32", type_v="f32", deterministic=True)
    s = Scheduler(Context(smollm2, params), n_cache_reuse=8)
    _run(s, x + d + y, 4)
    fin = _run(s, x + y, 4)[-1]
    assert fin.usage.prompt_tokens_cached == len(x) + len(y) - 1 and fin.timings["prompt_n"] == 1
    pos, k = _layer0_k(s.ctx, 0)
    assert pos == list(range(len(x) + len(y) + 3)) and s.slots[0].cache_tokens[:len(x) + len(y)] == x + y

    fresh = Scheduler(Context(smollm2, params))
    _run(fresh, x + y, 1)
    pos2, k2 = _layer0_k(fresh.ctx, 0)
    n = len(x) + len(y)
    assert pos2 == list(range(n))
    torch.testing.assert_close(k[:n], k2, rtol=1e-4, atol=1e-4)

    off = Scheduler(Context(smollm2, params))  # no --cache-reuse: only the common prefix
    _run(off, x + d + y, 4)
    assert _run(off, x + y, 4)[-1].usage.prompt_tokens_cached == len(x)
    _run(off, x + d + y, 4)
    assert _run(off, x + y, 4, n_cache_reuse=len(y) + 1)[-1].usage.prompt_tokens_cached == len(x)  # the chunk is too short
    _run(off, x + d + y, 4)
    assert _run(off, x + y, 4, n_cache_reuse=len(y))[-1].usage.prompt_tokens_cached == len(x) + len(y) - 1

    with serving_state(smollm2, n_ctx=512, np_=1) as st:  # the request field, over HTTP
        body = {"prompt": x + d + y, "n_predict": 2, "temperature": 0}
        asgi_call(st, "POST", "/completion", json=body)
        r = asgi_call(st, "POST", "/completion", json={**body, "prompt": x + y, "n_cache_reuse": 8}).json()
        assert r["timings"]["cache_n"] == len(x) + len(y) - 1 and r["timings"]["prompt_n"] == 1


def test_props_and_accepted_flags(tiny) -> None:
    from llamapy.cli import build_parser
    from llamapy.cli.serve import serve_settings

    def settings(*flags: str):
        return serve_settings(build_parser().parse_args(["serve", *flags]))

    assert (settings().n_cache_reuse, settings().props) == (0, False)
    assert settings("--cache-reuse", "256", "--props").n_cache_reuse == 256 and settings("--props").props
    assert settings("-cb") == settings("--cont-batching") == settings()
    with pytest.raises(ValueError, match="--cache-reuse"):
        settings("--cache-reuse", "-1").check()
    with serving_state(tiny, n_ctx=256, np_=1) as st:
        r = asgi_call(st, "POST", "/props", json={})
        assert r.status_code == 501 and "--props" in r.json()["error"]["message"]
        assert asgi_call(st, "GET", "/props").json()["endpoint_props"] is False
        st.props = True
        assert asgi_call(st, "POST", "/props", json={}).json() == {"success": True}
        assert asgi_call(st, "GET", "/props").json()["endpoint_props"] is True
