"""Stop strings over streamed text: emit only text that cannot turn out to be the start of a
stop string, and cut the text at the first full match (llama.cpp's find_partial_stop)."""
from __future__ import annotations

from dataclasses import dataclass, field


def partial_stop_len(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    best = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:n]):
                best = n
                break
    return best


@dataclass(slots=True)
class StopMatcher:
    stops: list[str]
    text: str = ""  # everything generated so far (cut at the stop when one matched)
    n_sent: int = 0  # characters of `text` already handed out
    matched: str = field(default="")

    def push(self, delta: str) -> str:
        """Add generated text; return the text that is now safe to emit.  After a full match
        `matched` is the stop string and the text ends just before it."""
        start = max(0, len(self.text) - max((len(s) for s in self.stops), default=0))
        self.text += delta
        if not self.stops:
            out, self.n_sent = self.text[self.n_sent:], len(self.text)
            return out
        hits = [(i, s) for s in self.stops if s and (i := self.text.find(s, start)) >= 0]
        if hits:
            i, s = min(hits)
            self.text, self.matched = self.text[:i], s
            end = len(self.text)
        else:
            end = len(self.text) - partial_stop_len(self.text, self.stops)
        end = max(end, self.n_sent)
        out, self.n_sent = self.text[self.n_sent:end], end
        return out

    def flush(self) -> str:
        """End of generation without a match: the held-back tail is ordinary text."""
        out, self.n_sent = self.text[self.n_sent:], len(self.text)
        return out
