"""The request body limit, as plain ASGI in front of the app: a body over the limit is a 413
before any route (or JSON parser) sees it.  A declared Content-Length over the limit is
refused without reading; a chunked body is read up to the limit and refused past it."""
from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BodyLimit:
    def __init__(self, app: Callable, limit: Callable[[], int]) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit()
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            return await _too_large(send, int(declared), limit)
        body, more = bytearray(), True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":  # the client left before sending its body
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > limit:
                return await _too_large(send, len(body), limit)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # later: disconnect detection

        await self.app(scope, replay, send)


async def _too_large(send: Send, n: int, limit: int) -> None:
    what = f"{n:,} bytes" if n > limit else "too large"
    msg = f"request body is {what}; the limit is {limit:,} bytes (--max-body {limit // (1024 * 1024)} MiB)"
    body = json.dumps({"error": {"message": msg, "type": "invalid_request_error", "code": 413}}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
