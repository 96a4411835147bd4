"""The web UI: the chat page at `/`, the engine view at `/engine` (static files shipped in the
package, server/webui/: plain HTML, CSS and JavaScript, no build step, nothing from a CDN),
and the engine view's stream /engine/events (scheduler/engine_events.py).

The pages themselves hold nothing secret and load without the API key (a browser cannot send
a header when it navigates); every call they make carries it (`Authorization: Bearer`).
--no-webui: `/`, `/engine` and the assets answer 404.  /engine/events is on with --metrics
or --engine-events (else 501, naming both), and needs the key like any route."""
from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .api_error import APIError
from .sse import EventStream

WEBUI_DIR = Path(__file__).resolve().parent / "webui"
PAGES = {"/": "index.html", "/engine": "engine.html"}
ASSET_PREFIX = "/webui/"
MEDIA = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

router = APIRouter(include_in_schema=False)


def is_webui_path(path: str) -> bool:
    """A path the browser loads without a key: the pages and their assets."""
    return path in PAGES or path.startswith(ASSET_PREFIX)


def _file(request: Request, name: str) -> FileResponse:
    path = WEBUI_DIR / name
    if not request.app.state.llama.webui or "/" in name or path.suffix not in MEDIA or not path.is_file():
        raise StarletteHTTPException(404)
    return FileResponse(path, media_type=MEDIA[path.suffix], headers={"Cache-Control": "no-cache"})


@router.get("/")
async def chat_page(request: Request) -> FileResponse:
    return _file(request, PAGES["/"])


@router.get("/engine")
async def engine_page(request: Request) -> FileResponse:
    return _file(request, PAGES["/engine"])


@router.get(ASSET_PREFIX + "{name}")
async def asset(request: Request, name: str) -> FileResponse:
    return _file(request, name)


@router.get("/engine/events")
async def engine_events(request: Request) -> EventStream:
    state = request.app.state.llama
    if not (state.metrics or state.engine_events):
        raise APIError(501, "This server does not publish engine events. Start it with `--engine-events` or `--metrics`")
    if not state.ready:
        raise APIError(503, "Loading model")
    return EventStream(state.scheduler.events.stream(), lambda: None)
