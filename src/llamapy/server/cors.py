"""CORS as llama-server answers it (tools/server/server-http.cpp's pre-routing handler):
every response gets Access-Control-Allow-Origin (--cors-origins: "*" by default; "localhost"
reflects a localhost Origin only; with --cors-credentials and "*", the Origin is echoed),
and an OPTIONS request is answered at once, before the API key is checked (browsers send no
Authorization on a preflight), with Allow-Credentials, Allow-Methods and Allow-Headers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlsplit

if TYPE_CHECKING:  # annotations only: `llamapy run` imports CorsSettings (cli/serve.py) and no server library
    from starlette.types import Message, Receive, Scope, Send


@dataclass(frozen=True, slots=True)
class CorsSettings:
    origins: str = "*"  # --cors-origins: "*", "localhost" or one origin
    methods: str = "GET, POST, DELETE, OPTIONS"  # --cors-methods
    headers: str = "*"  # --cors-headers
    credentials: bool = True  # --cors-credentials / --no-cors-credentials


def origin_is_localhost(origin: str) -> bool:
    """server-http.cpp's origin_is_localhost: the Origin URL's host is localhost, 127.0.0.1 or ::1."""
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in ("localhost", "127.0.0.1", "::1")


def allow_origin(c: CorsSettings, origin: str) -> str | None:
    """The Access-Control-Allow-Origin value for a request with this Origin (None: no header)."""
    if c.credentials and c.origins == "*":
        return origin or None  # nothing to echo
    if c.origins == "localhost":
        return origin if origin and origin_is_localhost(origin) else None
    return c.origins


class Cors:
    """ASGI middleware: the headers above on every HTTP response, OPTIONS answered here."""

    def __init__(self, app: Callable, settings: Callable[[], CorsSettings]) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        c = self.settings()
        origin = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"origin"), "")
        allow = allow_origin(c, origin)
        extra = [] if allow is None else [(b"access-control-allow-origin", allow.encode("latin-1"))]
        if scope["method"] == "OPTIONS":
            extra += [(b"access-control-allow-credentials", b"true" if c.credentials else b"false"),
                      (b"access-control-allow-methods", c.methods.encode("latin-1")),
                      (b"access-control-allow-headers", c.headers.encode("latin-1")),
                      (b"content-type", b"text/html"), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 200, "headers": extra})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with)
