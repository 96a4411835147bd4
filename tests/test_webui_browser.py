"""The web UI in headless Chromium (Debian's chromium + chromium-driver, driven by selenium)
against a real `llamapy serve` of the tiny model: a streamed reply, a stopped generation, the
conversation found again after a reload (localStorage), model text never parsed as HTML, the
engine view showing two sequences' cells and a step that batched both, and the API key asked
for and sent.  Skips, saying why, where no Chromium or selenium is installed.

LLAMAPY_SCREENSHOTS=docs/img saves both views there (SmolLM2 instead of the tiny model, so
the pictures show readable text); unset, nothing is written into the tree."""
from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest
from server_harness import serve_process

pytestmark = pytest.mark.slow
CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"), shutil.which("google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")
XSS = "<img src=x onerror=window.__pwned=1> **bold** `code`"


@pytest.fixture(scope="module")
def driver():
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no chromium found (apt-get install chromium chromium-driver; scripts/install.sh does where it can)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    d.set_script_timeout(30)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def model_path(smollm2_path) -> Path:
    """SmolLM2: a real model's reply is printable text that keeps growing while it streams (the
    random tiny model's greedy bytes can settle into control characters the page shows as
    nothing, so "more streamed text" would depend on its weights' rounding)."""
    return smollm2_path


def _wait(cond, timeout: float = 60.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _screenshot(d, name: str) -> None:
    folder = os.environ.get("LLAMAPY_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        d.save_screenshot(str(Path(folder) / name))


def _send(d, text: str) -> None:
    from selenium.webdriver.common.by import By

    box = d.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    d.find_element(By.ID, "send").click()


def _assistant_text(d) -> str:
    return d.execute_script("const m = document.querySelectorAll('.msg.assistant'); return m.length ? m[m.length - 1].textContent : '';")


def test_chat_stop_reload_and_no_html(driver, model_path):
    from selenium.webdriver.common.by import By

    d = driver
    # 16384 cells a slot: a greedy tiny-model reply runs long enough to be stopped
    with serve_process(["-m", str(model_path), "-c", "32768", "-np", "2", "--metrics", "-t", "1"]) as base:
        d.get(base + "/")
        d.execute_script("localStorage.clear();")
        d.get(base + "/")
        _wait(lambda: "n_ctx 32768" in d.find_element(By.ID, "model").text, what="/props in the header")
        assert "2 slots" in d.find_element(By.ID, "model").text
        for field, v in (("temperature", "0"), ("max_tokens", "24")):
            el = d.find_element(By.ID, field)
            el.clear()
            el.send_keys(v)
        _send(d, "What is the capital of France?")
        _wait(lambda: d.find_element(By.ID, "send").is_displayed() and "tokens/s" in _assistant_text(d), what="a finished reply")
        first = _assistant_text(d)
        assert len(first) > len("assistant") + len("24 tokens, 0.0 tokens/s"), first
        _screenshot(d, "webui-chat.png")

        # a long generation, seen streaming, then stopped
        el = d.find_element(By.ID, "max_tokens")
        el.clear()
        el.send_keys("-1")
        _send(d, "Tell me a very long story.")
        _wait(lambda: d.find_element(By.ID, "stop").is_displayed(), what="the stop button")
        _wait(lambda: len(_assistant_text(d)) > 40, what="streamed text")
        n1 = len(_assistant_text(d))
        _wait(lambda: len(_assistant_text(d)) > n1, what="more streamed text")  # it streams, not all at once
        d.find_element(By.ID, "stop").click()
        _wait(lambda: d.find_element(By.ID, "send").is_displayed(), what="send back after stop")
        assert _assistant_text(d).endswith("stopped")
        _wait(lambda: all(s["state"] == "idle" for s in httpx.get(base + "/slots").json()), what="the slot freed")

        # the conversation is there after a reload
        d.refresh()
        _wait(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 4, what="the conversation after reload")
        texts = [m.text for m in d.find_elements(By.CSS_SELECTOR, ".msg.user")]
        assert "What is the capital of France?" in texts[0] and "Tell me a very long story." in texts[1]
        assert len(d.find_elements(By.CSS_SELECTOR, "#conversations li")) == 1

        # JSON-schema mode forces a reply holding markup: it shows as text, no element is made
        d.find_element(By.ID, "new-chat").click()
        d.find_element(By.ID, "json_mode").click()
        schema = d.find_element(By.ID, "json_schema")
        schema.send_keys('{"const": "%s"}' % XSS)
        _send(d, "Say something.")
        _wait(lambda: d.find_element(By.ID, "send").is_displayed() and "tokens/s" in _assistant_text(d), what="the JSON reply")
        reply = _assistant_text(d)
        assert "<img src=x onerror=window.__pwned=1>" in reply, reply
        assert d.find_elements(By.CSS_SELECTOR, "#messages img") == []
        assert d.execute_script("return window.__pwned === undefined")
        assert d.find_elements(By.CSS_SELECTOR, ".msg.assistant strong")  # the markdown around it still renders


COUNTS_JS = """const out = {};
for (const e of document.querySelectorAll('#legend .seq-count')) out[e.dataset.seq] = Number(e.dataset.cells);
return out;"""
VIEW_JS = """return {runs0: document.querySelectorAll("#kv .strip .run[data-seq='0']").length,
runs1: document.querySelectorAll("#kv .strip .run[data-seq='1']").length,
strips: document.querySelectorAll('#kv .strip').length,
generating: document.querySelectorAll('#slots tr.slot.generating').length,
memory: document.getElementById('memory').textContent};"""


def _page_counts(d) -> dict[str, int]:
    """The engine view's cells per sequence (its legend), read in one script."""
    return d.execute_script(COUNTS_JS)


def test_engine_view_two_sequences(driver, model_path):
    d = driver
    # the tiny model fills 16384 cells a slot in seconds, SmolLM2 (screenshots) 2048 in a minute
    n_ctx = "4096" if os.environ.get("LLAMAPY_SCREENSHOTS") else "32768"
    with serve_process(["-m", str(model_path), "-c", n_ctx, "-np", "2", "--engine-events", "-t", "1"]) as base:
        stop = threading.Event()

        def run(prompt: str) -> None:
            with httpx.Client(base_url=base, timeout=300) as c:
                body = {"prompt": prompt, "max_tokens": 100000, "temperature": 0, "ignore_eos": True, "stream": True}
                with c.stream("POST", "/v1/completions", json=body) as r:
                    for _ in r.iter_lines():
                        if stop.is_set():
                            return

        ts = [threading.Thread(target=run, args=(p,), daemon=True) for p in ("The engine view shows", "Two sequences share")]
        for t in ts:
            t.start()
        try:
            d.get(base + "/engine")

            def both():
                counts = _page_counts(d)
                return counts if counts.get("0", 0) > 0 and counts.get("1", 0) > 0 else None

            counts = _wait(both, what="two sequences' cells")

            def generating():  # (a slot has cells while its prompt's last token still waits for its own step)
                v = d.execute_script(VIEW_JS)  # read in one go: the page redraws with every event
                return v if v["generating"] == 2 else None

            view = _wait(generating, what="both slots generating")
            assert view["runs0"] and view["runs1"] and view["strips"] == 2, view  # -np 2: a strip per stream
            assert "process RSS" in view["memory"], view
            _wait(lambda: d.execute_script("return document.querySelectorAll(\"#steps .step[data-slots='0,1']\").length"),
                  what="a step that batched both")
            if os.environ.get("LLAMAPY_SCREENSHOTS"):
                _wait(lambda: min(_page_counts(d).values()) > 150, what="a few more cells for the picture")
                _screenshot(d, "webui-engine.png")
        finally:
            stop.set()
            for t in ts:
                t.join(30)
        # the page's counts against /slots: two short requests leave their prompt caches in the slots
        _wait(lambda: all(s["state"] == "idle" for s in httpx.get(base + "/slots").json()), what="idle slots")
        short = [threading.Thread(target=httpx.post, args=(base + "/v1/completions",), daemon=True,
                                  kwargs={"json": {"prompt": p, "max_tokens": 8, "temperature": 0}, "timeout": 120})
                 for p in ("A short one", "And another, a little longer")]
        for t in short:
            t.start()
        for t in short:
            t.join(120)
        slots = httpx.get(base + "/slots").json()
        want = {str(s["id"]): s["n_tokens_cached"] for s in slots if s["n_tokens_cached"]}
        assert len(want) == 2, slots
        _wait(lambda: _page_counts(d) == want, what=f"the page's cell counts equal to /slots' {want}")
        assert counts  # seen while running


def test_api_key_asked_and_sent(driver, tiny_path):
    from selenium.webdriver.common.by import By

    d = driver
    with serve_process(["-m", str(tiny_path), "-c", "4096", "-np", "1", "--api-key", "sekrit", "-t", "1"]) as base:
        d.get(base + "/")
        d.execute_script("localStorage.clear();")
        d.refresh()
        dialog = _wait(lambda: (e := d.find_element(By.ID, "key-dialog")).is_displayed() and e, what="the key dialog")
        dialog.find_element(By.ID, "api-key").send_keys("sekrit")
        dialog.find_element(By.CSS_SELECTOR, "button").click()
        _wait(lambda: "n_ctx 4096" in d.find_element(By.ID, "model").text, what="/props with the key")
        el = d.find_element(By.ID, "max_tokens")
        el.clear()
        el.send_keys("8")
        _send(d, "hello")
        _wait(lambda: "tokens/s" in _assistant_text(d), what="a reply with the key")
        assert not d.find_element(By.ID, "error").is_displayed()
