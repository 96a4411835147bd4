"""A request's constraint: `grammar` (GBNF), `json_schema`, OpenAI `response_format`, or the
tool-call grammar; compiled before the request is queued, so a bad one is a 400 and no slot
ever sees it."""
from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool

from ..grammar import Constraint, GrammarError, GrammarSpec
from .api_error import APIError
from .bridge import ServerState
from ..chat.tools import ToolPlan


def response_format_spec(rf: dict[str, Any] | None) -> GrammarSpec | None:
    """OpenAI's response_format: text (none), json_object (any JSON object, or llama-server's
    optional "schema"), json_schema ({"json_schema": {"name", "schema", "strict"}})."""
    if rf is None:
        return None
    kind = rf.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return GrammarSpec.json_schema(rf.get("schema", {"type": "object"}))
    if kind == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict):
            raise APIError(400, 'response_format: type "json_schema" needs a "json_schema": {"name": ..., "schema": {...}} object')
        schema = js.get("schema", {"type": "object"})
        return GrammarSpec.json_schema(schema)
    raise APIError(400, f"response_format.type: {kind!r} is not one of text, json_object, json_schema")


def request_spec(grammar: str | None, json_schema: Any, response_format: dict[str, Any] | None = None,
                 tools: ToolPlan | None = None) -> GrammarSpec | None:
    """The one grammar a request asks for; 400 when it asks for two."""
    try:
        rf = response_format_spec(response_format)
        asked = {"grammar": grammar is not None, "json_schema": json_schema is not None,
                 "response_format": rf is not None, "tools": tools is not None and tools.lark is not None}
        names = [k for k, v in asked.items() if v]
        if len(names) > 1:
            if set(names) == {"grammar", "json_schema"}:
                raise APIError(400, 'Either "json_schema" or "grammar" can be specified, but not both')
            raise APIError(400, f"{' and '.join(names)} each constrain the output: give only one")
        if grammar is not None:
            return GrammarSpec("gbnf", grammar)
        if json_schema is not None:
            return GrammarSpec.json_schema(json_schema)
        if tools is not None and tools.lark is not None:
            return GrammarSpec("lark", tools.lark)
        return rf
    except GrammarError as e:
        raise APIError(400, str(e)) from None


async def compile_constraint(state: ServerState, spec: GrammarSpec | None) -> Constraint | None:
    """The request's constraint, compiled in a worker thread (the first one also builds the
    vocabulary's byte table); 400 with llguidance's message when it does not compile."""
    if spec is None:
        return None
    try:
        return await run_in_threadpool(state.grammars.constraint, spec)
    except GrammarError as e:
        raise APIError(400, str(e)) from None

