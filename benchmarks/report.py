"""The side-by-side table: one row per metric, llama.cpp | llamapy | ratio | target | met?, in
markdown (the README pastes it).  A row knows how its ratio is formed and whether its target
holds; a side that was not measured prints "-" and leaves "met?" empty."""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(slots=True)
class Row:
    """kind says how the numbers compare:
      speed  llamapy / llama.cpp, met when >= want           (t/s)
      time   llamapy / llama.cpp, met when <= want           (seconds: TTFT)
      ppl    relative difference, met when |d| <= want        (perplexity)
      file   llamapy / file bytes (cpp holds the file), met when <= want
      peak   llamapy vs want * file + slack (cpp holds the file), met when under
      mem    llamapy / llama.cpp, informational (bytes)
      top    difference in points, met when llamapy >= llama.cpp
      kld    llamapy / llama.cpp, met when <= 1"""

    metric: str
    cpp: float | None
    py: float | None
    kind: str = "speed"
    want: float | None = None
    target: str = ""
    slack: float = 0.0

    def ratio(self) -> float | None:
        if self.cpp is None or self.py is None:
            return None
        if self.kind == "top":
            return self.py - self.cpp
        if self.kind == "ppl":
            return self.py / self.cpp - 1 if self.cpp else None
        if self.kind == "peak":
            return self.py / self.cpp if self.cpp else None
        if self.kind == "kld" and -1e-6 < self.py < 0:  # a KLD of equal logits, summed in floats: 0 up to rounding
            return 0.0 if self.cpp > 0 else None
        return self.py / self.cpp if self.cpp > 0 and self.py >= 0 else None

    def met(self) -> bool | None:
        r = self.ratio()
        if r is None:
            return None
        if self.kind == "speed":
            return r >= self.want if self.want is not None else None
        if self.kind in ("time", "file"):
            return r <= self.want if self.want is not None else None
        if self.kind == "ppl":
            return abs(r) <= self.want if self.want is not None else None
        if self.kind == "peak":
            return self.py <= self.want * self.cpp + self.slack
        if self.kind == "top":
            return r >= 0
        if self.kind == "kld":
            return r <= 1
        return None

    def cells(self) -> tuple[str, str, str, str, str]:
        m = self.met()
        return (_value(self.cpp, self.kind), _value(self.py, self.kind), _ratio(self.ratio(), self.kind), self.target,
                "" if m is None else ("yes" if m else "**no**"))


def _value(v: float | None, kind: str) -> str:
    if v is None:
        return "-"
    if kind in ("file", "peak", "mem"):
        return f"{v / MiB:.1f} MiB"
    if kind == "top":
        return f"{100 * v:.3f}%"
    if kind == "kld":
        return f"{v:.6f}"
    if kind == "ppl":
        return f"{v:.4f}"
    if kind == "time":
        return f"{v:.2f} s"
    return f"{v:.2f}"


def _ratio(r: float | None, kind: str) -> str:
    if r is None:
        return "-"
    if kind == "top":
        return f"{100 * r:+.2f} pt"
    if kind == "ppl":
        return f"{100 * r:+.2f}%"
    return f"{r:.2f}x"


def markdown(title: str, rows: list[Row], cpp_name: str = "llama.cpp") -> str:
    """`### title` then the table; the header names the two columns."""
    head = ("metric", cpp_name, "llamapy", "ratio", "target", "met?")
    body = [(r.metric, *r.cells()) for r in rows]
    w = [max(len(head[i]), *(len(b[i]) for b in body)) if body else len(head[i]) for i in range(6)]
    right = (False, True, True, True, False, False)

    def line(cells) -> str:
        return "| " + " | ".join(c.rjust(w[i]) if right[i] else c.ljust(w[i]) for i, c in enumerate(cells)) + " |"

    sep = "| " + " | ".join(("-" * (w[i] - 1) + ":") if right[i] else "-" * w[i] for i in range(6)) + " |"
    return "\n".join([f"### {title}", "", line(head), sep, *(line(b) for b in body)]) + "\n"
