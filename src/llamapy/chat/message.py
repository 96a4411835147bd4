"""A model's output read back as an OpenAI assistant message, as llama-server's chat parser
gives it: reasoning (<think>...</think>, also when the prompt opened <think>; gpt-oss's
analysis channel) -> reasoning_content, calls in the format's syntax -> tool_calls, the rest
-> content.  parse_partial is the same for a prefix of the output (streaming): text that may
be the start of a marker is held back."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .harmony import parse_harmony
from .tool_syntax import ChatFormat, parse_calls

THINK, END_THINK = "<think>", "</think>"


@dataclass(slots=True)
class ParsedMessage:
    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def thinking_opened(prompt: str) -> bool:
    """The prompt ends inside a <think> block (QwQ, DeepSeek-R1 distills open it)."""
    tail = prompt.rstrip()
    return tail.endswith(THINK)


def _split_think(text: str, opened: bool, partial: bool) -> tuple[str, str]:
    t = text
    if not opened:
        s = t.lstrip()
        if not s.startswith(THINK):
            if partial and s and THINK.startswith(s):
                return "", ""
            return "", text
        t = s[len(THINK):]
    k = t.find(END_THINK)
    if k < 0:
        if partial:
            for n in range(len(END_THINK) - 1, 0, -1):
                if t.endswith(END_THINK[:n]):
                    t = t[:-n]
                    break
        return t.strip(), ""  # partial too: trailing spaces are held until the end shows them
    return t[:k].strip(), t[k + len(END_THINK):].lstrip()


def parse_message(text: str, fmt: ChatFormat, reasoning_format: str = "auto", opened: bool = False,
                  calls: bool = False, partial: bool = False, parallel: bool = True) -> ParsedMessage:
    """The message in `text`; calls: the request offered tools (calls are looked for);
    parallel: the request's parallel_tool_calls (without it, two calls are not a match)."""
    if fmt.kind == "gpt-oss":
        r, c, found = parse_harmony(text, reasoning_format, calls, partial)
        return ParsedMessage(c, r, found)
    reasoning, rest = "", text
    if reasoning_format != "none":
        reasoning, rest = _split_think(text, opened, partial)
        if reasoning_format == "deepseek-legacy":
            rest = text
    msg = ParsedMessage(reasoning_content=reasoning)
    if calls:
        if partial:
            cut = min([k for k in (rest.find(tr) for tr in fmt.triggers) if k >= 0], default=-1)
            if cut >= 0:
                return ParsedMessage(rest[:cut], reasoning)
            for tr in fmt.triggers:  # a marker that has begun at the end
                for n in range(len(tr) - 1, 0, -1):
                    if rest.endswith(tr[:n]):
                        return ParsedMessage(rest[:-n], reasoning)
            return ParsedMessage(rest, reasoning)
        content, found = parse_calls(rest, fmt.kind, parallel)
        msg.tool_calls = found
        msg.content = content.strip() if found else content
        return msg
    msg.content = rest
    return msg


@dataclass(slots=True)
class MessageDelta:
    """What a stream sends next: the text by which a re-parsed message's reasoning_content and
    content grew since the last call.  A field that changed other than by growing (a partial
    parse that turned out to be a tool call) sends nothing until it grows past what was sent."""
    sent: dict[str, str] = field(default_factory=lambda: {"reasoning_content": "", "content": ""})

    def grown(self, msg: ParsedMessage) -> list[tuple[str, str]]:
        """[(field, new text)] in the order reasoning_content, content."""
        out: list[tuple[str, str]] = []
        for key, was in self.sent.items():
            now = getattr(msg, key) or ""
            if now.startswith(was) and len(now) > len(was):
                out.append((key, now[len(was):]))
                self.sent[key] = now
        return out
