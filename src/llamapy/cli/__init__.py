"""The `llamapy` command line: main() runs one command, build_parser() is its argparse parser
(main.py); each subcommand is a module of this package."""
from __future__ import annotations

from .main import build_parser, main

__all__ = ["build_parser", "main"]
