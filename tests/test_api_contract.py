"""Contract testing with schemathesis: every route of the server's own OpenAPI document,
requests generated from its schemas (valid and invalid), against the real engine.  Zero 5xx
and every response within its declared schema (errors in OpenAI's shape included), with
its declared status code and content type; schema-invalid requests rejected.

Not checked: that every schema-valid request succeeds (schemathesis' positive_data_acceptance).
A request can match the schema and still be impossible -- a prompt longer than a slot, a
token id past the vocabulary -- and those are 400s that name the numbers."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, seed, settings

schemathesis = pytest.importorskip("schemathesis")

from server_harness import serving_state  # noqa: E402

from llamapy.server.http import create_app  # noqa: E402

pytestmark = pytest.mark.slow
N_CASES = int(os.environ.get("LLAMAPY_CONTRACT_CASES", "25"))  # per route and model; `make fuzz` runs more
SEED = os.environ.get("LLAMAPY_FUZZ_SEED", "15")  # the same cases each `make test`; `make fuzz`: "random"
RESULTS: dict[str, int] = {}


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def api(request):
    """The schema of a server over the tiny model (fast: many cases) or SmolLM2 (the real
    vocabulary and template; short slots so a case with a huge max_tokens stays short)."""
    model = request.getfixturevalue(request.param)
    n_ctx = 2048 if request.param == "tiny" else 512
    with serving_state(model, n_ctx=n_ctx, np_=2, n_batch=64) as st:
        st.timeout = 20.0
        yield schemathesis.openapi.from_asgi("/openapi.json", create_app(st)), request.param


def _operations(schema):
    for op in schema.get_all_operations():
        yield op.ok()


def _takes_input(op) -> bool:
    """A request body or parameters: something a negative case can get wrong."""
    return bool(len(op.body)) or any(True for _ in op.iter_parameters())


def test_every_route(api):
    """Every route, positive and negative cases: each failure is collected (all are reported
    together), anything else hypothesis or schemathesis raises (a strategy that cannot
    generate, a health check) fails the test at once; and every route ran cases: at least one
    positive case each, and at least one negative case for each route that takes input (a
    route without input has no negative cases: it is not asked for any)."""
    schema, name = api
    ops = list(_operations(schema))
    assert len(ops) >= 14
    failures = []
    negative = schemathesis.GenerationMode.NEGATIVE
    for op, mode in ((op, mode) for op in ops for mode in schemathesis.GenerationMode):
        if mode == negative and not _takes_input(op):
            continue  # nothing to get wrong: hypothesis cannot generate a case (Unsatisfiable)
        n = 0
        mine: list[str] = []

        @settings(max_examples=N_CASES if name == "tiny" else max(3, N_CASES // 5), deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=mode))
        def run(case) -> None:
            nonlocal n
            n += 1
            try:
                # the client waits past the server's own deadline (st.timeout): a slow case is its 504
                case.call_and_validate(excluded_checks=[schemathesis.checks.positive_data_acceptance], timeout=60)
            except Exception as e:  # noqa: BLE001 - collected and reported together
                mine.append(f"{op.label} {mode.value}: {type(e).__name__}: {str(e)[:400]}")
                raise

        if SEED != "random":
            run = seed(int(SEED))(run)
        try:
            run()
        except Exception:
            if not mine:  # not a case that failed its checks: hypothesis' or schemathesis' own error
                raise
        failures += mine
        RESULTS[f"{name} {op.label} {mode.value}"] = n
    print("\nschemathesis cases per route:", RESULTS)
    assert not failures, "\n".join(failures[:5])
    want = [f"{name} {op.label} {mode.value}" for op in ops for mode in schemathesis.GenerationMode
            if mode != negative or _takes_input(op)]
    assert all(RESULTS[k] >= 1 for k in want), {k: RESULTS[k] for k in want if RESULTS[k] < 1}
