"""GET and POST /tools: llama-server's built-in agent tools (--tools; tools/server/server-tools.cpp
server_tools::setup, routed in server.cpp).

Without --tools both answer 403 `this feature is disabled`.  With it:
GET /tools: the enabled tools, each `{display_name, tool, type: "server", permissions: {write},
uses_cwd, definition}` (definition: the OpenAI function a chat request can offer).
POST /tools `{"tool": NAME, "params": {...}, "stream": false}`: the tool's JSON answer (a 200 even
when it reports `{"error": TEXT}`).  Headers, never params, set `x-tool-cwd` (relative paths
and the shell's directory), `x-resp-type: base64` (read_file's bytes) and `x-tool-runtime`
(refused: llamapy runs tools on the host only).  A tool that is unknown or not enabled, or
stream = true for a tool that cannot stream, is a 404 `File Not Found` (llama-server's HTTP layer
replaces its handler's 404 body); a body or params value that does not read is a 400, anything
else a 500, each with llama-server's bare error object `{"code", "message", "type"}`.  stream = true (exec_shell_command only): text/event-stream of
`data: {"chunk": TEXT}` events, then `data: {"done": true}` (with "error" when the tool failed)."""
from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from .api_error import ERROR_TYPES, error_response
from .bridge import ServerState
from .http_proxy import feature_disabled
from .tools_base import Params, ServerTool, ToolParamError, check_runtime, json_type_name, required_str
from .tools_edit import edit_tool
from .tools_exec import exec_tools
from .tools_fs import fs_tools

router = APIRouter()


def all_tools() -> list[ServerTool]:
    """Every built-in tool, in llama-server's order (build_tools)."""
    read, glob, grep, write = fs_tools()
    exec_, info = exec_tools()
    return [read, glob, grep, exec_, write, edit_tool(), info]


def enabled_tools(names: tuple[str, ...]) -> list[ServerTool]:
    """The tools --tools names ("all": every one); the names were checked at startup."""
    return [t for t in all_tools() if "all" in names or t.name in names]


def tool_error(status: int, message: str) -> JSONResponse:
    """llama-server's format_error_response, not wrapped in {"error": ...}, as server-tools.cpp answers."""
    return JSONResponse({"code": status, "message": message, "type": ERROR_TYPES[status]}, status_code=status)


def find_tool(tools: list[ServerTool], name: str, stream: bool) -> ServerTool | None:
    """The enabled tool NAME (None: unknown, not enabled, or stream = true for one that cannot)."""
    return next((t for t in tools if t.name == name and (t.support_stream or not stream)), None)


def tool_params(body: dict[str, Any], headers: Any) -> Params:
    """The body's params with cwd, runtime and resp_type taken from the headers only."""
    params = body.get("params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ToolParamError(f"[json.exception.type_error.304] cannot use at() with {json_type_name(params)}")
    params = {k: v for k, v in params.items() if k not in ("cwd", "runtime", "resp_type")}
    for header, key in (("x-tool-cwd", "cwd"), ("x-tool-runtime", "runtime"), ("x-resp-type", "resp_type")):
        if headers.get(header):
            params[key] = headers[header]
    return params


def _invoke(tool: ServerTool, params: Params, sink=None) -> Any:
    check_runtime(params.get("runtime", ""))
    return tool.invoke(params, sink)


async def _events(tool: ServerTool, params: Params) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    alive = threading.Event()
    alive.set()

    def put(ev: dict[str, Any]) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, ev)
        except RuntimeError:  # the loop has closed: nobody listens
            alive.clear()

    def sink(chunk: str) -> bool:
        if chunk:
            put({"chunk": chunk})
        return alive.is_set()

    def work() -> None:
        done: dict[str, Any] = {"done": True}
        try:
            _invoke(tool, params, sink)
        except Exception as e:  # the tool's failure ends the stream, as llama-server's worker
            done["error"] = str(e) or "An unknown error occurred"
        put(done)

    threading.Thread(target=work, name=f"tool-{tool.name}", daemon=True).start()
    try:
        while True:
            ev = await queue.get()
            yield f"data: {json.dumps(ev, ensure_ascii=False)}\n\n"
            if ev.get("done"):
                return
    finally:
        alive.clear()  # the client left: the next chunk kills the command


@router.get("/tools", include_in_schema=False)
async def get_tools(request: Request):
    state: ServerState = request.app.state.llama
    if not state.server_tools:
        return feature_disabled()
    return JSONResponse([t.to_json() for t in enabled_tools(state.server_tools)])


@router.post("/tools", include_in_schema=False)
async def post_tools(request: Request):
    state: ServerState = request.app.state.llama
    if not state.server_tools:
        return feature_disabled()
    try:
        body = json.loads(await request.body())
    except ValueError as e:
        return tool_error(400, f"[json.exception.parse_error.101] parse error: {e}")
    try:
        name = required_str(body, "tool")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise ToolParamError(f"[json.exception.type_error.302] type must be boolean, but is {json_type_name(stream)}")
        params = tool_params(body, request.headers)
    except ToolParamError as e:
        return tool_error(400, str(e))
    tool = find_tool(enabled_tools(state.server_tools), name, stream)
    if tool is None:  # llama-server's handler says `unknown tool "NAME"`; its HTTP layer sends this instead
        return error_response(404, "File Not Found", type="not_found_error")
    if stream:
        return StreamingResponse(_events(tool, params), media_type="text/event-stream")
    try:
        result = await asyncio.to_thread(_invoke, tool, params)
    except ToolParamError as e:
        return tool_error(400, str(e))
    except Exception as e:  # a tool's failure: llama-server's 500 server_error
        return tool_error(500, str(e) or "unknown error")
    return JSONResponse(result)
