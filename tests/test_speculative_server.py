"""Speculative decoding in the server: each slot drafts on its own, the drafts go into the
step's one batch beside other slots' tokens and prompt chunks, and greedy output is what the
server gives without speculation; per-request speculative.* fields, timings and /metrics."""
from __future__ import annotations

import re

from server_harness import serving_state, step_all, asgi_call as _call

from llamapy import Context, ContextParams
from llamapy.sampling import SamplingParams
from llamapy.server.request import Event, Request
from llamapy.server.scheduler import Scheduler
from llamapy.speculative import SpecParams
from llamapy.speculative.proposer import make_proposers

CODE = ("# utils.py\ndef add_all(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n\n"
        "\n# utils_v2.py (same as utils.py, with a docstring)\ndef add_all(xs):\n    \"\"\"Sum xs.\"\"\"\n    total = 0\n")
PROMPTS = [CODE, "The history of the bicycle begins in", "Passage: The Nile flows north into the Mediterranean. "
           "Question: Where does the Nile end? Answer:", "List the days of the week: Monday, Tuesday,"]


def _serve(model, spec: SpecParams | None, requests: list[tuple[str, dict]], np_: int = 8,
           max_tokens: int = 24, n_ctx: int = 0) -> tuple[list[list[int]], list[Event], Scheduler]:
    """The requests (prompt, speculative overrides) submitted together to a scheduler stepped
    synchronously; each one's tokens, each one's final event, the scheduler."""
    params = ContextParams(n_ctx=n_ctx or 256 * np_, n_batch=256, n_ubatch=256, n_seq_max=np_, kv_unified=False)
    ctx = Context(model, params)
    props = make_proposers(spec, model, params, np_) if spec is not None else None
    s = Scheduler(ctx, spec, props)
    evs: list[list[Event]] = []
    for prompt, o in requests:
        ev: list[Event] = []
        ids = model.tokenize(prompt, add_special=True, parse_special=True)
        s.submit(Request(prompt=ids, max_tokens=max_tokens, sampling=SamplingParams(temp=0.0), sink=ev.append, spec=o))
        evs.append(ev)
    step_all(s, evs, 2000)
    return [[x.token for x in e if not x.final] for e in evs], [e[-1] for e in evs], s


def test_server_greedy_unchanged_some_speculate(smollm2):
    """8 concurrent requests, every other one with speculative.n_max = 0: the same tokens as
    a server without speculation; drafts only for the others, and some accepted."""
    reqs = [(PROMPTS[i % 4], {} if i % 2 == 0 else {"n_max": 0}) for i in range(8)]
    plain, _, _ = _serve(smollm2, None, reqs)
    spec = SpecParams(type="ngram-simple", ngram_size_n=2, ngram_size_m=6)
    out, finals, s = _serve(smollm2, spec, reqs)
    assert out == plain
    assert all(f.timings["draft_n"] == 0 for f in finals[1::2])
    assert sum(f.timings["draft_n_accepted"] for f in finals[0::2]) > 0
    m = s.metrics
    assert m.n_draft_tokens == sum(f.timings["draft_n"] for f in finals) > 0
    assert m.n_draft_accepted == sum(f.timings["draft_n_accepted"] for f in finals)
    assert any(r.kind == "draft" for r in s.last_batch) or m.n_draft_verif_steps > 0


def test_server_draft_model_unchanged(smollm2_path, smollm2):
    """draft-simple: one draft context, a sequence per slot; the same greedy tokens."""
    reqs = [(PROMPTS[i], {}) for i in range(4)]
    plain, _, _ = _serve(smollm2, None, reqs, np_=4, max_tokens=16)
    spec = SpecParams(type="draft-simple", draft_model=str(smollm2_path), n_max=3)
    out, finals, s = _serve(smollm2, spec, reqs, np_=4, max_tokens=16)
    assert out == plain
    assert s.metrics.n_draft_accepted > 0
    for p in s.proposers:  # each slot's draft cache holds only the tokens its sequence kept
        assert p.ctx.memory.seq_pos_max(p.seq_id) == len(p.cached) - 1


def test_server_draft_reads_the_prompt_with_it(smollm2_path, smollm2):
    """The draft model reads a request's prompt as part of its prompt processing (as
    llama-server mirrors the prompt's batches into its draft context): when the first token
    is out, the slot's draft cache holds the prompt, so that reading is in prompt_ms, not in
    the generation's tokens/s; and a request with speculative.n_max 0 leaves it empty."""
    spec = SpecParams(type="draft-simple", draft_model=str(smollm2_path), n_max=3)
    params = ContextParams(n_ctx=512, n_batch=256, n_ubatch=256, n_seq_max=2, kv_unified=False)
    ctx = Context(smollm2, params)
    s = Scheduler(ctx, spec, make_proposers(spec, smollm2, params, 2))
    ids = smollm2.tokenize(PROMPTS[0], add_special=True, parse_special=True)
    evs: list[list[Event]] = [[], []]
    s.submit(Request(prompt=ids, max_tokens=8, sampling=SamplingParams(temp=0.0), sink=evs[0].append, spec={}))
    s.submit(Request(prompt=ids, max_tokens=8, sampling=SamplingParams(temp=0.0), sink=evs[1].append, spec={"n_max": 0}))
    for _ in range(50):
        s.update_slots()
        if evs[0] and evs[1]:
            break
    assert evs[0] and evs[1], "no first tokens"
    by_seq = {p.seq_id: p for p in s.proposers}
    for slot in s.slots:  # a slot's draft sequence is its id
        p = by_seq[slot.id]
        if slot.request.spec.get("n_max") == 0:
            assert p.cached == []
        else:
            assert p.cached == ids  # read with the prompt, before any draft
            assert p.ctx.memory.seq_pos_max(p.seq_id) == len(ids) - 1


def test_http_speculative_fields(tiny):
    """speculative.n_max above the server's limit is a 400 naming both numbers and the flag;
    the server keeps serving; timings carry draft_n / draft_n_accepted; /metrics the totals."""
    spec = SpecParams(type="ngram-simple", ngram_size_n=1, ngram_size_m=4)
    with serving_state(tiny, n_ctx=1024, np_=2, n_batch=64, spec=spec) as st:
        r = _call(st, "POST", "/completion", json={"prompt": "a b a b a b a b a b", "n_predict": 8, "speculative.n_max": 99})
        assert r.status_code == 400
        assert "speculative.n_max (99)" in r.text and "--spec-ngram-simple-size-m 4" in r.text
        r = _call(st, "POST", "/completion", json={"prompt": "a b a b a b a b a b", "n_predict": 8, "temperature": 0,
                                                   "speculative.n_max": 3})
        assert r.status_code == 200, r.text
        t = r.json()["timings"]
        # the prompt repeats "a b": its last token has a continuation in the history from the
        # first step, so ngram-simple drafts for certain (accepted or not)
        assert t["draft_n"] > 0 and t["draft_n"] >= t["draft_n_accepted"] >= 0, t
        m = _call(st, "GET", "/metrics").text
        drafted = re.search(r"^llamacpp:spec_decode_num_draft_tokens_total (\S+)$", m, re.M)
        accepted = re.search(r"^llamacpp:spec_decode_num_accepted_tokens_total (\S+)$", m, re.M)
        assert drafted and accepted, m
        assert float(drafted.group(1)) >= t["draft_n"] and float(accepted.group(1)) >= t["draft_n_accepted"]
        bad = _call(st, "POST", "/completion", json={"prompt": "x", "speculative.n_max": -1})
        assert bad.status_code in (400, 422)
