"""Every `llamapy` subcommand and flag stays as recorded in tests/data/cli_flags.json (made by
scripts/cli_flags.py --write from the parser): a flag or command that disappears, is renamed
or changes its dest, default, choices or help fails here, with the difference printed.  And
the command line stays on top: no library module imports llamapy.cli."""
from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "cli_flags.py"


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


def test_no_library_module_imports_the_cli():
    """Only llamapy/__main__.py (the program) may import llamapy.cli; the server, the replicas
    and the pipeline take typed settings instead of parsing argv."""
    pkg = ROOT / "src" / "llamapy"
    bad = []
    for p in sorted(pkg.rglob("*.py")):
        rel = p.relative_to(pkg)
        if rel.parts[0] == "cli" or rel == Path("__main__.py"):
            continue
        depth = len(rel.parts) - 1  # packages between llamapy and the file
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    names = [node.module or ""]
                elif node.level == depth + 1:  # relative to llamapy itself
                    names = [f"llamapy.{node.module}"] if node.module else [f"llamapy.{a.name}" for a in node.names]
            bad += [f"{rel}:{node.lineno}" for n in names if n == "llamapy.cli" or n.startswith("llamapy.cli.")]
    assert not bad, f"modules outside llamapy/cli import it: {bad}"
