"""What every built-in agent tool (--tools; llama-server's tools/server/server-tools.cpp) shares:
the tool record GET /tools lists, the params readers with llama-server's JSON semantics, and
the path resolution against the x-tool-cwd header.

Params: a required one read as `params.at(key).get<T>()` (missing or of the wrong type: a 400
with nlohmann's text, ToolParamError); an optional one as `json_value` (absent, null or of the
wrong type: the default)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

Params = dict[str, Any]
Json = dict[str, Any]
# a streaming tool's sink: called with each chunk of output; False means the client has gone
ChunkSink = Callable[[str], bool]


class ToolParamError(ValueError):
    """A params value the tool cannot read (llama-server's common_json_error: a 400)."""


class ToolRuntimeError(RuntimeError):
    """A tool call llama-server answers with a 500 server_error (a bad x-tool-runtime)."""


@dataclass(frozen=True)
class ServerTool:
    """One built-in tool: llama-server's server_tool (its to_json() is what GET /tools lists)."""

    name: str
    display_name: str
    definition: Json  # {"type": "function", "function": {name, description, parameters}}
    invoke: Callable[[Params, ChunkSink | None], Json | None]
    permission_write: bool = False
    support_stream: bool = False  # only exec_shell_command streams
    uses_cwd: bool = True

    def to_json(self) -> Json:
        return {"display_name": self.display_name, "tool": self.name, "type": "server",
                "permissions": {"write": self.permission_write}, "uses_cwd": self.uses_cwd,
                "definition": self.definition}


def function_def(name: str, description: str, properties: Json, required: list[str] | None) -> Json:
    params: Json = {"type": "object", "properties": properties}
    if required is not None:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


def prop(type_: str, description: str) -> Json:
    return {"type": type_, "description": description}


def json_type_name(v: Any) -> str:
    """nlohmann's type_name()."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def at(obj: Any, key: str) -> Any:
    """`obj.at(key)`: the value, or ToolParamError with nlohmann's text."""
    if not isinstance(obj, dict):
        raise ToolParamError(f"[json.exception.type_error.304] cannot use at() with {json_type_name(obj)}")
    if key not in obj:
        raise ToolParamError(f"[json.exception.out_of_range.403] key '{key}' not found")
    return obj[key]


def required_str(obj: Any, key: str) -> str:
    """`obj.at(key).get<std::string>()`."""
    v = at(obj, key)
    if not isinstance(v, str):
        raise ToolParamError(f"[json.exception.type_error.302] type must be string, but is {json_type_name(v)}")
    return v


def json_value(params: Params, key: str, default: Any) -> Any:
    """llama-server's json_value(): the value when it reads as the default's type (a number
    reads as an int, truncated; a bool as 0/1), else the default."""
    v = params.get(key) if isinstance(params, dict) else None
    if v is None:
        return default
    if isinstance(default, bool):
        return v if isinstance(v, bool) else default
    if isinstance(default, int):
        return int(v) if isinstance(v, (int, float)) else default
    if isinstance(default, str):
        return v if isinstance(v, str) else default
    return v


def expand_home(path: str) -> str:
    """A leading `~` or `~/`: $HOME (llama-server's expand_home; `~user` stays)."""
    if not path.startswith("~") or (len(path) > 1 and path[1] not in "/\\"):
        return path
    home = os.environ.get("HOME", "")
    return home + path[1:] if home else path


def resolve(path: str, cwd: str) -> str:
    """`path` made absolute against cwd (the x-tool-cwd header, else the server's working
    directory), `~` expanded, `.` and `..` dropped (tools_io_basic::resolve)."""
    p = expand_home(path)
    if not os.path.isabs(p):
        p = os.path.join(cwd or os.getcwd(), p)
    return os.path.normpath(p)


def check_runtime(spec: str) -> None:
    """x-tool-runtime (or --tools-runtime): llama-server routes the call into a container or
    over ssh; llamapy runs tools on the host only, so any runtime is refused, with llama-server's
    own text for a spec it would refuse too (make_tools_io)."""
    if not spec:
        return
    for engine in ("docker", "podman"):
        if spec.startswith(engine + "-container:"):
            cid = spec[len(engine) + 11:]
            if not cid or not cid[0].isalnum() or not all(c.isalnum() or c in ".-_" for c in cid):
                raise ToolRuntimeError(f"invalid container id: {cid}")
            break
        if spec.startswith(engine + ":"):
            raise ToolRuntimeError(f"tool runtime must name a running container: {spec}")
    else:
        if not spec.startswith("ssh:"):
            raise ToolRuntimeError(f"unknown tool runtime: {spec}")
        target = spec[4:]
        if not target or target[0] == "-" or not all(c.isalnum() or c in ".-_@" for c in target):
            raise ToolRuntimeError(f"invalid ssh target: {target}")
    raise ToolRuntimeError(f"tool runtime not supported by llamapy (tools run on the host only): {spec}")
