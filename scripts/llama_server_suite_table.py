#!/usr/bin/env python3
"""The table of scripts/llama_server_suite.sh: per test file, passed / failed / skipped for
each server (from pytest's -v lines in RESULTS/SERVER.log and any earlier RESULTS/SERVER.partN.log,
so a run cut short still counts what it ran; JUnit XML RESULTS/SERVER.xml where the log is absent), then every test that
llama-server passes and llamapy does not.  Also writes RESULTS/tests.tsv (test, outcome per server).

    llama_server_suite_table.py RESULTS_DIR SERVER [SERVER ...]"""
from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


LINE = re.compile(r"^unit/(test_\w+)\.py::(\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
KIND = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "failed", "SKIPPED": "skipped",
        "XFAIL": "skipped"}


def outcomes(xml: Path) -> dict[str, str]:
    """{"file::test": passed|failed|skipped} (errors count as failed)."""
    out: dict[str, str] = {}
    logs = sorted(xml.parent.glob(f"{xml.stem}.part*.log")) + [xml.with_suffix(".log")]  # earlier partial runs first
    if any(log.exists() for log in logs):
        for log in filter(Path.exists, logs):
            for line in log.read_text(errors="replace").splitlines():
                m = LINE.match(line)
                if m:  # an ERROR at teardown after PASSED, or a later run: the later line wins
                    out[f"{m[1]}::{m[2]}"] = KIND[m[3]]
        return out
    if not xml.exists():
        return out
    for tc in ET.parse(xml).getroot().iter("testcase"):
        cls = tc.get("classname", "")
        name = f"{cls.split('.')[-1]}::{tc.get('name')}"
        kinds = {c.tag for c in tc}
        out[name] = ("failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed")
    return out


def main() -> int:
    results, servers = Path(sys.argv[1]), sys.argv[2:]
    per = {s: outcomes(results / f"{s}.xml") for s in servers}
    files = sorted({t.split("::")[0] for o in per.values() for t in o})
    head = f"{'file':28}" + "".join(f"{s + ' p/f/s':>22}" for s in servers)
    print(head)
    print("-" * len(head))
    tot = {s: defaultdict(int) for s in servers}
    for f in files:
        row = f"{f:28}"
        for s in servers:
            c = defaultdict(int)
            for t, o in per[s].items():
                if t.split("::")[0] == f:
                    c[o] += 1
                    tot[s][o] += 1
            row += f"{c['passed']:>12}/{c['failed']}/{c['skipped']}".rjust(22)
        print(row)
    print(f"{'total':28}" + "".join(f"{tot[s]['passed']:>12}/{tot[s]['failed']}/{tot[s]['skipped']}".rjust(22)
                                      for s in servers))
    tests = sorted({t for o in per.values() for t in o})
    with open(results / "tests.tsv", "w") as fh:
        fh.write("test\t" + "\t".join(servers) + "\n")
        for t in tests:
            fh.write(t + "\t" + "\t".join(per[s].get(t, "-") for s in servers) + "\n")
    if "llamapy" in per and "llama-server" in per:
        gap = [t for t in tests if per["llama-server"].get(t) == "passed" and per["llamapy"].get(t) in ("failed", "skipped")]
        unrun = [t for t in tests if t not in per["llamapy"] or t not in per["llama-server"]]
        print(f"\nllama-server passes, llamapy does not ({len(gap)}):")
        for t in gap:
            print(f"  {t}: {per['llamapy'][t]}")
        if unrun:
            print(f"\nrun on one server only (the other's run was cut short): {len(unrun)}")
    print(f"\nper test: {results / 'tests.tsv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
