"""Every POST body read as JSON, whatever its Content-Type, as llama-server does (it parses the
body of /completion, /v1/chat/completions .. with json::parse and never looks at the header):
`curl -d '{"prompt": ..}' URL`, whose Content-Type is application/x-www-form-urlencoded, works
as with llama.cpp instead of failing FastAPI's body validation.  Plain ASGI in front of the app:
the request's content-type header is set to application/json."""
from __future__ import annotations

from typing import Any, Awaitable, Callable

Scope = dict[str, Any]


class JsonBody:
    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[dict]], send: Callable) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST":
            headers = [(k, v) for k, v in scope.get("headers") or [] if k != b"content-type"]
            scope = dict(scope, headers=headers + [(b"content-type", b"application/json")])
        await self.app(scope, receive, send)
