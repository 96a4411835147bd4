"""gpt-oss's harmony output read back (llama.cpp common/parsers/gpt-oss.cpp; the cases of
tests/test-chat.cpp): messages separated by `<|start|>assistant`, each a header (an optional
` to=RECIPIENT`, `<|channel|>CHANNEL`, maybe ` to=RECIPIENT` and ` <|constrain|>TYPE`),
`<|message|>`, a body up to `<|end|>`, `<|call|>` or `<|return|>`.

  analysis, no recipient        -> reasoning_content
  final / commentary, none      -> content
  to=functions.NAME             -> a tool call, the body its JSON arguments
  any other recipient (python)  -> dropped (a built-in tool llamapy does not run)

With reasoning_format none the analysis messages stay in content as written."""
from __future__ import annotations

import json
import re
from typing import Any

_HEADER = re.compile(r"^(?:\s*to=(?P<r1>[^\s<]+))?\s*<\|channel\|>(?P<ch>\w+)(?:\s*to=(?P<r2>[^\s<]+))?"
                     r"(?:\s*<\|constrain\|>\s*\w+)?\s*<\|message\|>")
_ENDS = ("<|end|>", "<|call|>", "<|return|>")


def _held(s: str, markers: tuple[str, ...]) -> str:
    """s without a trailing beginning of one of markers (it may still become one)."""
    for mk in markers:
        for n in range(len(mk) - 1, 0, -1):
            if s.endswith(mk[:n]):
                return s[:-n]
    return s


def _messages(text: str, partial: bool) -> list[tuple[str | None, str, str, bool, str]]:
    """(recipient, channel, body, ended, raw) per message; text that is no message -> channel
    "".  partial: a header not complete yet, or the start of an end marker, is held back."""
    out = []
    for part in text.split("<|start|>assistant"):
        if not part:
            continue
        m = _HEADER.match(part)
        if m is None:
            s = part.lstrip()
            if partial and (s.startswith(("<", "to=")) or "to=".startswith(s)):
                continue
            out.append((None, "", _held(part, ("<|start|>assistant",)) if partial else part, True, part))
            continue
        body, ended = part[m.end():], False
        for e in _ENDS:
            k = body.find(e)
            if k >= 0:
                body, ended = body[:k], True
        if partial and not ended:
            body = _held(body, _ENDS + ("<|start|>assistant",))
        out.append((m.group("r1") or m.group("r2"), m.group("ch"), body, ended, part))
    return out


def parse_harmony(text: str, reasoning_format: str, calls_on: bool,
                  partial: bool = False) -> tuple[str, str, list[dict[str, Any]]]:
    """(reasoning, content, calls as {"name", "arguments", "id"})."""
    reasoning, content, calls = [], [], []
    for rcpt, ch, body, ended, raw in _messages(text, partial):
        if rcpt is not None:
            if rcpt.startswith("functions.") and calls_on and not partial:
                try:
                    args = json.dumps(json.loads(body), ensure_ascii=False)
                except json.JSONDecodeError:
                    content.append(raw)
                    continue
                calls.append({"name": rcpt[len("functions."):], "arguments": args, "id": ""})
            continue
        if ch == "analysis":
            if reasoning_format == "none":
                content.append(f"<|channel|>analysis<|message|>{body}" + ("<|end|>" if ended or not partial else ""))
            else:
                reasoning.append(body)
        else:
            content.append(body)
    return "".join(reasoning), "".join(content), calls
