"""--deterministic in the server (-np 4): concurrent greedy and seeded requests of different
lengths give the same tokens as each request alone, with and without ngram-simple
speculation.  "Alone" runs the requests one after another on one server, so later ones hit
the prompt cache of earlier ones (a shared prefix) and land in other slots."""
from __future__ import annotations

import pytest

from server_harness import step_all

from llamapy import Context, ContextParams
from llamapy.sampling import SamplingParams
from llamapy.server.request import Event, Request
from llamapy.server.scheduler import Scheduler
from llamapy.speculative import SpecParams
from llamapy.speculative.proposer import make_proposers

CODE = "# utils.py\ndef add_all(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n\n"
JOBS = [  # (prompt, max_tokens, sampling)
    (CODE, 24, SamplingParams(temp=0.0)),
    ("The history of the bicycle begins in", 16, SamplingParams(temp=0.0)),
    ("List the days of the week: Monday, Tuesday,", 20, SamplingParams(temp=0.0)),
    (CODE + "# utils_v2.py (same, with a docstring)\ndef add_all(xs):\n", 24, SamplingParams(temp=0.0)),
    ("Once upon a time", 18, SamplingParams(temp=0.9, seed=1234)),
    ("Passage: The Nile flows north. Question: Where does it end? Answer:", 12, SamplingParams(temp=0.0)),
]


def _scheduler(model, det: bool, spec: SpecParams | None) -> Scheduler:
    params = ContextParams(n_ctx=2048, n_batch=256, n_ubatch=256, n_seq_max=4, kv_unified=False, deterministic=det)
    ctx = Context(model, params)
    return Scheduler(ctx, spec, make_proposers(spec, model, params, 4) if spec is not None else None)


def _run(s: Scheduler, model, jobs: list) -> list[list[tuple]]:
    """Each request's tokens with their probability and top-5 (token, prob): floats from the
    logits, so a rounding difference shows even where the argmax holds."""
    evs: list[list[Event]] = []
    for prompt, n, sp in jobs:
        ev: list[Event] = []
        ids = model.tokenize(prompt, add_special=True, parse_special=True)
        s.submit(Request(prompt=ids, max_tokens=n, sampling=sp, sink=ev.append, n_probs=5))
        evs.append(ev)
    step_all(s, evs, 3000)
    return [[(x.token, x.prob, x.probs) for x in e if not x.final] for e in evs]


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request, smollm2_path, gemma3_path):
    from llamapy.model.model import Model

    return Model.load(smollm2_path if request.param == "smollm2" else gemma3_path)


@pytest.mark.slow
@pytest.mark.parametrize("spec", [None, SpecParams(type="ngram-simple", ngram_size_n=2, ngram_size_m=6)],
                         ids=["plain", "ngram-simple"])
def test_concurrent_equals_alone(model, spec):
    s = _scheduler(model, True, spec)
    alone = [_run(s, model, [job])[0] for job in JOBS]  # one at a time: slots reused, prefixes cached
    s2 = _scheduler(model, True, spec)
    together = _run(s2, model, JOBS)
    assert spec is None or min(s.metrics.n_draft_tokens, s2.metrics.n_draft_tokens) > 0, "no draft was verified"
    bad = [i for i, (a, t) in enumerate(zip(alone, together)) if a != t]
    assert not bad, f"--deterministic: requests {bad} differ between alone and concurrent"
    assert all(len(a) == n for a, (_, n, _) in zip(alone, JOBS))
