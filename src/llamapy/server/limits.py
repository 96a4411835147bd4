"""The request body limit, as plain ASGI in front of the app: a body over the limit is a 413
before any route (or JSON parser) sees it.  A declared Content-Length over the limit, or a
chunked body past the limit, is refused at once.

Clients that send the whole body before reading (Python's urllib, requests, httpx) must see
that 413, not a reset: closing a socket with unread bytes makes the kernel answer with RST,
and the RST throws away the 413 the client has not read yet.  So the 413 is written first,
then the rest of the body is read and discarded (drained) before the connection closes,
bounded: at most DRAIN_FACTOR x the limit (and DRAIN_MIN bytes) and DRAIN_SECONDS of time;
past either bound the connection closes as before.  A client that sent `Expect:
100-continue` has not sent its body: nothing is drained (it gets the 413 instead of 100)."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DRAIN_FACTOR = 8  # bytes drained after a 413: up to this many times the limit ..
DRAIN_MIN = 1024 * 1024  # .. and at least this many
DRAIN_SECONDS = 5.0  # and for at most this long


class BodyLimit:
    def __init__(self, app: Callable, limit: Callable[[], int]) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit()
        headers = dict(scope.get("headers") or [])
        drain = headers.get(b"expect", b"").lower() != b"100-continue"
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            return await _too_large(send, receive if drain else None, int(declared), limit, 0)
        body, more = bytearray(), True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":  # the client left before sending its body
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > limit:
                return await _too_large(send, receive if more else None, len(body), limit, len(body))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # later: disconnect detection

        await self.app(scope, replay, send)


async def _too_large(send: Send, receive: Receive | None, n: int, limit: int, read: int) -> None:
    """The 413 with llama-server's error JSON and `connection: close`; then, with receive,
    the body's rest drained (bounded, see the module's doc) before the response ends, which
    is when the server closes the connection.  read: body bytes already read."""
    what = f"{n:,} bytes" if n > limit else "too large"
    msg = f"request body is {what}; the limit is {limit:,} bytes (--max-body {limit // (1024 * 1024)} MiB)"
    body = json.dumps({"error": {"message": msg, "type": "invalid_request_error", "code": 413}}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": receive is not None})
    if receive is None:
        return
    await _drain(receive, max(DRAIN_FACTOR * limit, DRAIN_MIN) - read, DRAIN_SECONDS)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _drain(receive: Receive, budget: int, seconds: float) -> int:
    """Read and discard the request body until it ends, the client leaves, `budget` bytes
    were read or `seconds` passed; the bytes read."""
    got, deadline = 0, time.monotonic() + seconds
    while got < budget:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            msg = await asyncio.wait_for(receive(), left)
        except asyncio.TimeoutError:
            break
        if msg["type"] != "http.request":
            break
        got += len(msg.get("body", b""))
        if not msg.get("more_body", False):
            break
    return got
