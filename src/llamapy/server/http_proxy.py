"""llama-server's /cors-proxy (--ui-mcp-proxy; tools/server/server-cors-proxy.h) and the 403
`this feature is disabled` of a switched-off feature (also /tools without --tools: tools_routes.py).

/cors-proxy?url=URL, GET or POST: the request goes to URL (http or https, a host, no password
in it) carrying only the headers the caller named explicitly as
`x-llama-server-proxy-header-NAME: value` (sent as `NAME: value`; Accept-Encoding,
Transfer-Encoding and Content-Length are not, Host names the target), with POST's body;
redirects are followed.  The target's answer comes back as it streams: its status, its
content type and its headers but Server, Transfer-Encoding, Content-Length, Keep-Alive and
Access-Control-* (this server sends its own CORS headers).  The caller's own Authorization,
Cookie, X-Api-Key, ... are never forwarded.  A bad URL is a 500 naming it; a target that cannot
be reached a 500 `proxy error: ...`.  Without --ui-mcp-proxy: 403 `this feature is disabled`."""
from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from typing import Any, AsyncIterator
from urllib.parse import urlsplit, urlunsplit

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from .api_error import error_response
from .bridge import ServerState

router = APIRouter()

PROXY_HEADER_PREFIX = "x-llama-server-proxy-header-"
NOT_FORWARDED = frozenset({"accept-encoding", "transfer-encoding", "content-length"})
NOT_RETURNED = frozenset({"server", "transfer-encoding", "content-length", "keep-alive", "connection"})
PROXY_TIMEOUT = 600.0  # seconds: llama-server's timeout_read / timeout_write for the proxy


def feature_disabled() -> JSONResponse:
    """A switched-off feature: llama-server's res_403 body, which has no `code` (its
    format_error_response is not used there)."""
    return JSONResponse({"error": {"message": "this feature is disabled", "type": "feature_disabled"}},
                        status_code=403)


def target_url(url: str) -> str:
    """The URL to request, checked as llama-server checks it (ValueError naming the problem);
    a user name in it is dropped (httplib sends none)."""
    if "://" not in url:
        raise ValueError("invalid URL: no scheme")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme: {parts.scheme}")
    if parts.password:
        raise ValueError("authentication in target URL is not supported")
    host = parts.netloc.rsplit("@", 1)[-1]
    if not parts.hostname:
        raise ValueError("invalid target URL: missing host")
    return urlunsplit((parts.scheme, host, parts.path or "/", parts.query, ""))


def forwarded_headers(headers: list[tuple[str, str]], url: str) -> dict[str, str]:
    """Only the explicitly named proxy headers, their prefix dropped; Host names the target."""
    out: dict[str, str] = {}
    for key, value in headers:
        if not key.lower().startswith(PROXY_HEADER_PREFIX):
            continue
        name = key[len(PROXY_HEADER_PREFIX):]
        if not name or name.lower() in NOT_FORWARDED:
            continue
        out[name] = urlsplit(url).netloc if name.lower() == "host" else value
    return out


def returned_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    return {k: v for k, v in headers
            if k.lower() not in NOT_RETURNED and not k.lower().startswith("access-control-") and k.lower() != "content-type"}


class _NoCrossSchemeRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects followed, to http(s) only."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if urlsplit(newurl).scheme not in ("http", "https"):
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _open(req: urllib.request.Request) -> Any:
    opener = urllib.request.build_opener(_NoCrossSchemeRedirect, urllib.request.ProxyHandler({}))
    try:
        return opener.open(req, timeout=PROXY_TIMEOUT)
    except urllib.error.HTTPError as e:  # a 4xx/5xx answer is still the target's answer
        return e


async def _body(resp: Any) -> AsyncIterator[bytes]:
    try:
        while chunk := await asyncio.to_thread(resp.read1 if hasattr(resp, "read1") else resp.read, 65536):
            yield chunk
    finally:
        resp.close()


async def _proxy(request: Request, method: str):
    state: ServerState = request.app.state.llama
    if not state.ui_mcp_proxy:
        return feature_disabled()
    raw = request.query_params.get("url", "")
    try:
        url = target_url(raw)
    except ValueError as e:
        return error_response(500, str(e))
    data = await request.body() if method == "POST" else None
    req = urllib.request.Request(url, data=data, headers=forwarded_headers(list(request.headers.items()), url), method=method)
    try:
        resp = await asyncio.to_thread(_open, req)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return PlainTextResponse(f"proxy error: {reason}", status_code=500)
    headers = list(resp.headers.items())
    ctype = next((v for k, v in headers if k.lower() == "content-type"), None)
    return StreamingResponse(_body(resp), status_code=resp.status, headers=returned_headers(headers), media_type=ctype)


@router.get("/cors-proxy", include_in_schema=False)
async def cors_proxy_get(request: Request):
    return await _proxy(request, "GET")


@router.post("/cors-proxy", include_in_schema=False)
async def cors_proxy_post(request: Request):
    return await _proxy(request, "POST")
