"""The web UI without a browser: `/` and `/engine` serve the pages and every asset they load,
shipped as package data; --no-webui gives 404; with --api-key the pages load but the API
does not; /engine/events streams the per-step view whose KV cell counts match /slots; and
the stream costs the server under 5% of its tokens/s."""
from __future__ import annotations

import fnmatch
import json
import re
import os
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import httpx
import pytest
from server_harness import asgi_call, serving_state, uvicorn_server

from llamapy.cli.main import build_parser
from llamapy.cli.serve import serve_settings
from llamapy.server.bridge import ServerState
from llamapy.server.webui_routes import WEBUI_DIR

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def state(tiny):
    with serving_state(tiny, n_ctx=1024, np_=2, n_batch=64) as st:
        yield st


def _assets(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="(/webui/[^"]+)"', html)


@pytest.mark.parametrize("page", ["/", "/engine"])
def test_pages_and_their_assets(state, page):
    r = asgi_call(state, "GET", page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assets = _assets(r.text)
    assert any(a.endswith(".js") for a in assets) and any(a.endswith(".css") for a in assets), assets
    for a in assets:
        got = asgi_call(state, "GET", a)
        assert got.status_code == 200, a
        assert got.headers["content-type"].startswith("text/javascript" if a.endswith(".js") else "text/css"), a
        assert got.content == (WEBUI_DIR / a.rsplit("/", 1)[1]).read_bytes()
    assert "http://" not in r.text and "https://" not in r.text  # nothing from a CDN: works offline


def test_unknown_asset_404(state):
    for path in ("/webui/nope.js", "/webui/..%2Fhttp.py", "/webui/app.py"):
        assert asgi_call(state, "GET", path).status_code == 404, path


def test_model_text_never_reaches_innerhtml():
    """The pages build model text with textContent / text nodes only."""
    for f in WEBUI_DIR.glob("*.js"):
        src = f.read_text()
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", src), f.name


def test_package_data_ships_the_webui():
    """pyproject's package-data globs match every file of server/webui/ (a wheel ships them)."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["llamapy"]
    files = [p.relative_to(ROOT / "src/llamapy").as_posix() for p in WEBUI_DIR.iterdir()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)


def test_no_webui_404(tiny):
    a = build_parser().parse_args(["serve", "--no-webui"])
    assert serve_settings(a).webui is False and serve_settings(build_parser().parse_args(["serve"])).webui is True
    with serving_state(tiny, n_ctx=512, np_=1, n_batch=32) as st:
        st.webui = False
        for path in ("/", "/engine", "/webui/app.js"):
            r = asgi_call(st, "GET", path)
            assert r.status_code == 404 and r.json()["error"]["message"] == f"File Not Found: GET {path}", path
        assert asgi_call(st, "GET", "/props").status_code == 200


def test_api_key_pages_open_api_closed(tiny):
    with serving_state(tiny, n_ctx=512, np_=1, n_batch=32, api_key="sekrit") as st:
        assert asgi_call(st, "GET", "/").status_code == 200
        assert asgi_call(st, "GET", "/webui/app.js").status_code == 200
        assert asgi_call(st, "GET", "/props").status_code == 401
        assert asgi_call(st, "GET", "/engine/events").status_code == 401
        assert asgi_call(st, "GET", "/props", headers={"Authorization": "Bearer sekrit"}).status_code == 200
        st.webui = False  # without the web UI, the pages are not open paths either
        assert asgi_call(st, "GET", "/").status_code == 401


def test_engine_events_off_without_flag(tiny):
    assert serve_settings(build_parser().parse_args(["serve", "--engine-events"])).engine_events is True
    with serving_state(tiny, n_ctx=512, np_=1, n_batch=32) as st:
        st.metrics = False
        r = asgi_call(st, "GET", "/engine/events")
        assert r.status_code == 501 and "--engine-events" in r.json()["error"]["message"]


def _events(base: str, until, timeout: float = 60.0) -> dict:
    """The first /engine/events event for which until(ev) holds."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=base, timeout=timeout) as c, c.stream("GET", "/engine/events") as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                ev = json.loads(line[6:])
                if until(ev):
                    return ev
            assert time.monotonic() < deadline, "no such event in time"
    raise AssertionError("stream ended")


def _cells(ev: dict) -> dict[int, int]:
    out: dict[int, int] = {}
    for st in ev["kv"]["streams"]:
        for s, n in enumerate(st["cells_per_seq"]):
            out[s] = out.get(s, 0) + n
        runs = st["runs"]
        assert sum(n for _, n in runs) == st["size"] and sum(n for c, n in runs if c != -1) == st["used"]
        assert st["n_kv"] % ev["kv"]["n_pad"] == 0 or st["n_kv"] == st["size"]
    return out


def test_engine_events_cells_match_slots(tiny):
    """Two requests run: an event shows both slots' cells and a step whose batch holds both,
    each slot's cell count equal to its n_tokens_cached in the same snapshot; once idle, the
    event's counts equal /slots and /metrics."""
    with serving_state(tiny, n_ctx=2048, np_=2, n_batch=64) as st, uvicorn_server(st) as base:
        body = {"max_tokens": 400, "temperature": 0, "ignore_eos": True}
        done: list[int] = []

        def run(prompt: str) -> None:
            with httpx.Client(base_url=base, timeout=120) as c:
                done.append(c.post("/v1/completions", json={**body, "prompt": prompt}).status_code)

        ts = [threading.Thread(target=run, args=(p,)) for p in ("one two three", "four five six seven")]
        for t in ts:
            t.start()
        ev = _events(base, lambda e: len(e["batch"]["slots"]) == 2 and all(s["state"] == "generating" for s in e["slots"]))
        cells = _cells(ev)
        assert all(cells[s["id"]] == s["n_tokens_cached"] > 0 for s in ev["slots"]), (cells, ev["slots"])
        assert {r[0] for r in ev["batch"]["rows"]} == {0, 1} and sum(ev["batch"]["ubatches"]) == ev["batch"]["n_tokens"]
        assert set(ev["memory"]) == {"weights", "kv", "compute", "output", "rss"} and ev["memory"]["rss"] > ev["memory"]["weights"]
        for t in ts:
            t.join(120)
        assert done == [200, 200]
        ev = _events(base, lambda e: all(s["state"] == "idle" for s in e["slots"]))
        slots = httpx.get(base + "/slots").json()
        assert _cells(ev) == {s["id"]: s["n_tokens_cached"] for s in slots}
        metrics = httpx.get(base + "/metrics").text
        used = int(re.search(r"^llamacpp:kv_cells_used (\d+)$", metrics, re.M).group(1))
        assert used == sum(_cells(ev).values()) == ev["metrics"]["kv_cells_used"]


LISTEN = """
import sys, httpx
with httpx.stream("GET", sys.argv[1], timeout=300) as r:
    for chunk in r.iter_raw():
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
"""


ROUNDS = 3  # pairs of requests for the printed end-to-end ratio


def _size(f) -> int:
    return os.fstat(f.fileno()).st_size


def _wait_size(f, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _size(f) < n:
        assert time.monotonic() < deadline, "the subscriber got nothing"
        time.sleep(0.02)


@pytest.mark.slow
def test_engine_events_cost_under_5_percent(smollm2):
    """With an /engine/events subscriber open (another process, as a browser is), the engine's
    time spent on it (EngineEvents.publish_s in the scheduler thread + sse_s turning events into
    text on the loop, which holds the GIL the scheduler needs) is under 5% of the request's
    wall time, in each of 3 requests.
    Contract: a ratio of tokens/s with and without a subscriber is what a user sees, but on CI's
    shared 2 cores one request's t/s moves 40-70% between runs (CI printed 38.7-79.0 t/s for
    one setting; the fastest of 9 pairs still read 0.925 with nothing changed), so it is printed,
    not asserted.  The engine's own time on subscribers is a share of the same wall clock: load
    that stretches the step stretches it alike, so the share stays put; a publisher that costs
    every token 5% raises it past the bound."""
    with serving_state(smollm2, n_ctx=1024, np_=1, n_batch=64) as st, uvicorn_server(st) as base:
        c = httpx.Client(base_url=base, timeout=300)
        ev = st.scheduler.events

        def tps() -> float:
            r = c.post("/completion", json={"prompt": "Once upon a time", "n_predict": 32, "temperature": 0, "ignore_eos": True})
            return r.json()["timings"]["predicted_per_second"]

        def with_subscriber() -> tuple[float, float]:
            """tps() while a client in another process reads /engine/events, and the share of
            the request's wall time the engine spent on it."""
            with tempfile.TemporaryFile() as out:
                sub = subprocess.Popen([sys.executable, "-c", LISTEN, base + "/engine/events"], stdout=out)
                try:
                    _wait_size(out, 1)
                    n0 = _size(out)
                    busy0, t0 = ev.publish_s + ev.sse_s, time.perf_counter()
                    v = tps()
                    share = (ev.publish_s + ev.sse_s - busy0) / (time.perf_counter() - t0)
                    assert _size(out) > n0 + 1000  # it really streamed during the request (events of ~1.5 kB)
                finally:
                    sub.kill()
                    sub.wait()
            return v, share

        tps()  # warm-up
        without, with_, shares = [], [], []
        for i in range(ROUNDS):  # pairs, in alternating order: A B, B A, ...
            if i % 2 == 0:
                a, (b, sh) = tps(), with_subscriber()
            else:
                (b, sh), a = with_subscriber(), tps()
            without.append(a)
            with_.append(b)
            shares.append(sh)
        print(f"engine events cost: {', '.join(f'{x:.2%}' for x in shares)} of the request's wall time; "
              f"fastest tokens/s with/without a subscriber {max(with_) / max(without):.3f}")
        assert max(shares) < 0.05, f"time on the subscriber, share of each request's wall time: {shares}"
