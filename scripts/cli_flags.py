"""The `llamapy` command line as data: every subcommand and, per subcommand, every argument
(option strings, dest, action, nargs, type, choices, default, required, help, metavar, its
argument group and mutually exclusive group), walked from llamapy.cli.build_parser().

    python scripts/cli_flags.py                # print the JSON
    python scripts/cli_flags.py --write        # rewrite tests/data/cli_flags.json
    python scripts/cli_flags.py --check        # compare with it; exit 1 and print the difference

tests/test_cli_flags.py runs the comparison.  A changed flag is either a mistake or a change
made on purpose: then --write, and the diff of the JSON says what changed.  Internal names
(the functions behind type= and set_defaults(fn=...)) are recorded without a leading underscore
or as "<callable>", so that moving code does not count as a change."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "cli_flags.json"


def _value(v):
    """A default / const / choice as JSON: callables by kind, tuples as lists."""
    if callable(v) and not isinstance(v, type):
        return "<callable>"
    if isinstance(v, (list, tuple)):
        return [_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _value(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)


def _type_name(t) -> str | None:
    if t is None:
        return None
    return getattr(t, "__name__", type(t).__name__).lstrip("_")


def _groups(p: argparse.ArgumentParser) -> tuple[dict[int, str], dict[int, int]]:
    """Per action (by id): the title of its argument group, the index of its mutually exclusive group."""
    title = {id(a): g.title for g in p._action_groups for a in g._group_actions}
    mutex = {id(a): i for i, g in enumerate(p._mutually_exclusive_groups) for a in g._group_actions}
    return title, mutex


def _argument(a: argparse.Action, title: dict[int, str], mutex: dict[int, int]) -> dict:
    return {
        "options": list(a.option_strings),  # [] for a positional
        "dest": a.dest,
        "action": type(a).__name__.lstrip("_"),
        "nargs": a.nargs,
        "takes_value": a.nargs != 0,
        "const": _value(a.const),
        "type": _type_name(a.type),
        "choices": _value(list(a.choices)) if a.choices is not None else None,
        "default": _value(a.default),
        "required": a.required,
        "help": a.help,
        "metavar": _value(a.metavar),
        "group": title.get(id(a)),
        "mutex": mutex.get(id(a)),
    }


def _parser(p: argparse.ArgumentParser) -> dict:
    title, mutex = _groups(p)
    return {
        "prog": p.prog,
        "description": p.description,
        "defaults": {k: _value(v) for k, v in sorted(p._defaults.items())},
        "arguments": [_argument(a, title, mutex) for a in p._actions
                      if not isinstance(a, argparse._SubParsersAction)],
    }


def cli_flags() -> dict:
    """The whole command line: the top-level parser, then each subcommand in --help's order."""
    from llamapy.cli import build_parser

    top = build_parser()
    out = {"parser": _parser(top), "commands": {}}
    for sub in (a for a in top._actions if isinstance(a, argparse._SubParsersAction)):
        helps = {c.dest: c.help for c in sub._choices_actions}
        for name, p in sub.choices.items():
            out["commands"][name] = {"help": helps.get(name), **_parser(p)}
    return out


def diff(old: dict, new: dict) -> list[str]:
    """Readable differences between two cli_flags() records (empty: the same)."""
    lines: list[str] = []
    if old.get("parser") != new.get("parser"):
        lines.append(f"top-level parser: {json.dumps(old.get('parser'))} -> {json.dumps(new.get('parser'))}")
    oc, nc = old.get("commands", {}), new.get("commands", {})
    lines += [f"command removed: {c}" for c in oc if c not in nc]
    lines += [f"command added: {c}" for c in nc if c not in oc]
    if [c for c in oc if c in nc] != [c for c in nc if c in oc]:
        lines.append(f"command order: {list(oc)} -> {list(nc)}")
    for c in (c for c in oc if c in nc):
        o, n = oc[c], nc[c]
        for k in sorted((set(o) | set(n)) - {"arguments"}):
            if o.get(k) != n.get(k):
                lines.append(f"{c}: {k}: {o.get(k)!r} -> {n.get(k)!r}")
        key = lambda a: a["dest"] + " " + " ".join(a["options"])  # noqa: E731
        oa, na = {key(a): a for a in o["arguments"]}, {key(a): a for a in n["arguments"]}
        lines += [f"{c}: argument removed: {k}" for k in oa if k not in na]
        lines += [f"{c}: argument added: {k}" for k in na if k not in oa]
        for k in (k for k in oa if k in na):
            for f in sorted(set(oa[k]) | set(na[k])):
                if oa[k].get(f) != na[k].get(f):
                    lines.append(f"{c}: {k}: {f}: {oa[k].get(f)!r} -> {na[k].get(f)!r}")
        if [k for k in oa if k in na] != [k for k in na if k in oa]:
            lines.append(f"{c}: argument order changed")
    return lines


def dumps(rec: dict) -> str:
    """The record as JSON, one line per argument (so that a change is a one-line diff)."""
    args: list[str] = []

    def mark(p: dict) -> dict:
        out = dict(p)
        out["arguments"] = []
        for a in p["arguments"]:
            args.append(json.dumps(a, ensure_ascii=False))
            out["arguments"].append(f"\0{len(args) - 1}\0")
        return out

    marked = {"parser": mark(rec["parser"]), "commands": {c: mark(p) for c, p in rec["commands"].items()}}
    text = json.dumps(marked, indent=1, ensure_ascii=False)
    for i, a in enumerate(args):
        text = text.replace(json.dumps(f"\0{i}\0"), a, 1)
    return text + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite {DATA}")
    ap.add_argument("--check", action="store_true", help=f"compare with {DATA}")
    a = ap.parse_args(argv)
    now = cli_flags()
    if a.write:
        DATA.write_text(dumps(now))
        print(f"wrote {DATA}: {len(now['commands'])} commands, "
              f"{sum(len(c['arguments']) for c in now['commands'].values())} arguments")
        return 0
    if a.check:
        d = diff(json.loads(DATA.read_text()), now)
        print("\n".join(d) if d else "the command line is as recorded")
        return 1 if d else 0
    sys.stdout.write(dumps(now))
    return 0


if __name__ == "__main__":
    sys.exit(main())
