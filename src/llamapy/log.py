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


class Progress:
    """llama.cpp's progress dots for a step that can take a while: the component's line,
    then one dot per 2% of the work, then a newline, on the stream setup_logging chose.
    Silent when the logger is below INFO or writes nowhere (library use, tests).

        with Progress("llama_model_loader", "reading 90.12 MiB into the page cache") as p:
            for ...: p.update(done / total)"""

    STEP = 0.02

    def __init__(self, component: str, message: str) -> None:
        log = logger(component)
        self.stream = None
        if log.isEnabledFor(logging.INFO):
            root = logging.getLogger("llamapy")
            streams = [h.stream for h in root.handlers if isinstance(h, logging.StreamHandler)]
            self.stream = streams[0] if streams else None
        self.head = f"{component}: {message} "
        self.shown = 0

    def __enter__(self) -> "Progress":
        if self.stream is not None:
            self.stream.write(self.head)
            self.stream.flush()
        return self

    def update(self, fraction: float) -> None:
        if self.stream is None:
            return
        n = int(min(1.0, fraction) / self.STEP)
        if n > self.shown:
            self.stream.write("." * (n - self.shown))
            self.stream.flush()
            self.shown = n

    def __exit__(self, *exc) -> None:
        if self.stream is not None:
            self.stream.write(" done\n" if exc[0] is None else "\n")
            self.stream.flush()
