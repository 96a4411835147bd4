"""Errors in OpenAI's shape ({"error": {"message", "type", "code"}}): APIError, raised by any
route or helper and answered by the app's handler, and the body and response it becomes."""
from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from .request import Event

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               405: "invalid_request_error", 413: "invalid_request_error", 422: "invalid_request_error",
               500: "server_error", 501: "not_supported_error", 503: "unavailable_error", 504: "timeout_error"}


class APIError(Exception):
    """An HTTP error a route answers with: status, message, optional headers (Retry-After)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 type: str | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers
        self.type, self.extra = type, extra  # llama-server's own error types and fields (exceed_context_size_error)


def error_body(status: int, message: str, type: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type or ERROR_TYPES.get(status, "server_error"), "code": status,
                      **(extra or {})}}


def error_response(status: int, message: str, headers: dict[str, str] | None = None,
                   type: str | None = None, extra: dict[str, Any] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, type, extra), status_code=status, headers=headers)


def final_error(ev: Event) -> APIError | None:
    """A final event that ended in error/abort, as the HTTP error it maps to."""
    if ev.finish_reason == "abort":
        return APIError(503, ev.error or "request aborted")
    if ev.finish_reason == "error":
        return APIError(500, ev.error or "internal error")
    if ev.finish_reason == "timeout":
        return APIError(504, ev.error)
    return None



async def json_body(request: Request, kind: type | None = None, expected: str = "") -> Any:
    """The request's body parsed as JSON: a 400 "malformed JSON" when it is not JSON, and a 400
    with `expected` when `kind` is given and the value is not of it (dict: an object, list: an array)."""
    try:
        body = await request.json()
    except ValueError as e:
        raise APIError(400, f"malformed JSON in request body: {e}") from None
    if kind is not None and not isinstance(body, kind):
        raise APIError(400, expected)
    return body
