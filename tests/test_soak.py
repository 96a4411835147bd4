"""The short soak of `make test`: benchmarks/soak.py against a real `llamapy serve` process
on the tiny model, 300 mixed requests (streamed and not, cancelled, malformed, too long,
constrained), 8 at a time.  The 2,000-request run on SmolLM2 is `benchmarks/soak.py -n 2000`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import soak  # noqa: E402

pytestmark = pytest.mark.slow


def test_soak_300(tiny_path, tmp_path):
    out = tmp_path / "soak.json"
    rc = soak.main(["-m", str(tiny_path), "-n", "300", "-C", "8", "-np", "4", "-c", "2048", "-t", "1", "--json", str(out)])
    rep = json.loads(out.read_text())
    assert rep["unexpected"] == []
    assert all(m < soak.NEAR_TIE for m in rep["margins"]), rep["differing"]  # near ties only: the batch's rounding
    assert sum(rep["counts"].values()) == 300 and rep["counts"]["cancel"] > 0 and rep["counts"]["too-long"] > 0
    assert rep["identical"] > 100
    assert rep["rss_end_mib"] - rep["rss_warm_mib"] <= 32
    assert rep["metrics"]["kv_cells_active"] == 0 and rep["metrics"]["requests_processing"] == 0
    assert rep["metrics"]["requests_cancelled_total"] > 0
    assert rc == 0
