"""Every `llamapy` subcommand and flag stays as recorded in tests/data/cli_flags.json (made by
scripts/cli_flags.py --write from the parser): a flag or command that disappears, is renamed
or changes its dest, default, choices or help fails here, with the difference printed."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "cli_flags.py"


def _script():
    spec = importlib.util.spec_from_file_location("cli_flags", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cli_flags_as_recorded():
    m = _script()
    old = json.loads(m.DATA.read_text())
    new = m.cli_flags()
    d = m.diff(old, new)
    print("\n".join(d))
    assert not d, "the command line changed (scripts/cli_flags.py --write records a change made on purpose):\n" + "\n".join(d)
    assert new == old  # anything diff() does not itemize


def test_diff_names_a_lost_flag_and_command():
    m = _script()
    rec = m.cli_flags()
    lost = json.loads(json.dumps(rec))
    lost["commands"]["run"]["arguments"] = [a for a in lost["commands"]["run"]["arguments"] if "-c" not in a["options"]]
    del lost["commands"]["pull"]
    d = m.diff(rec, lost)
    assert "command removed: pull" in d
    assert "run: argument removed: ctx_size -c --ctx-size" in d
