"""llama.cpp-style log lines ("llama_context: n_ctx = 8192") on the `llamapy` logger.

Library code only calls `logger(name)`; the CLI decides where lines go (stderr by default)."""
from __future__ import annotations

import logging
import sys


def logger(component: str) -> logging.Logger:
    """Logger for one llama.cpp component (llama_context, llama_kv_cache, ...)."""
    return logging.getLogger(f"llamapy.{component}")


class _PrefixFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        comp = record.name.split(".", 1)[-1]
        prefix = "" if comp == "llamapy" else f"{comp}: "
        level = "warning: " if record.levelno == logging.WARNING else ""
        level = "error: " if record.levelno >= logging.ERROR else level
        return f"{prefix}{level}{record.getMessage()}"


def setup_logging(verbose: bool = True, stream=None) -> None:
    """Send llamapy's log lines to `stream` (stderr); INFO when verbose, else WARNING."""
    root = logging.getLogger("llamapy")
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_PrefixFormatter())
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False
