"""Response header names in their conventional case (`Content-Type`, `Process-Start-Time-Unix`,
`Access-Control-Allow-Origin`), as llama-server (cpp-httplib) writes them.  HTTP says names are
case-insensitive, but a client that copies the headers into a plain dict (llama.cpp's server
tests do `dict(response.headers)`, then `"Process-Start-Time-Unix" in headers`) sees the case
on the wire.  Starlette lowercases every name it sets, so this ASGI middleware title-cases them
in `http.response.start`; the server writes them as given only with uvicorn's h11 protocol
(`cli/serve.py` asks for it: httptools' lowercases every name again)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from starlette.types import Message, Receive, Scope, Send


def title_case(name: bytes) -> bytes:
    """b"access-control-allow-origin" -> b"Access-Control-Allow-Origin"."""
    return b"-".join(part[:1].upper() + part[1:].lower() for part in name.split(b"-"))


class HeaderCase:
    """ASGI middleware: every response header name title-cased, values untouched."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_cased(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [(title_case(k), v) for k, v in message.get("headers", [])]}
            await send(message)

        await self.app(scope, receive, send_cased)
