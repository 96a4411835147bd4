"""Server-sent events: one event's text (sse, sse_event with its name) and the streaming response that frees its
request however it ends (EventStream)."""
from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable

from fastapi.responses import StreamingResponse

SSE_ESCAPES = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}  # sse(): line ends to str.splitlines


def sse(obj: Any) -> str:
    """One server-sent event: `data: <json>` and a blank line.  Contract: the JSON holds no
    character that any reader takes for a line end.  json.dumps escapes the C0 controls, but
    with ensure_ascii=False it leaves U+0085, U+2028 and U+2029 raw, and readers that split
    lines the way str.splitlines does (httpx's iter_lines / aiter_lines, and a client reading the
    stream with them) cut the event there; a sampled token can be any of them.  (The openai
    package's own SSE decoder splits only at CR and LF.)  They are written as JSON escapes,
    which decode to the same text."""
    return f"data: {json.dumps(obj, ensure_ascii=False).translate(SSE_ESCAPES)}\n\n"


def sse_event(kind: str, obj: Any) -> str:
    """A named server-sent event: its `event:` line, then its data (Anthropic's and the
    Responses API's streams name each event)."""
    return f"event: {kind}\n" + sse(obj)


class EventStream(StreamingResponse):
    """text/event-stream that runs on_close when the response ends for any reason (a client
    that went away included), so its request is cancelled and its slot freed."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[override]
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
