"""GET / POST /lora-adapters (llama-server's): the loaded adapters with their global scales,
and setting those scales ([{id, scale}], the ids not listed at 0; they apply to requests that
start afterwards and carry no `lora` of their own).  A bad id or scale is a 400 naming it,
with nothing changed."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from .api_error import APIError, json_body
from .bridge import ServerState
from .lora_scales import LoraRequestError, adapters_json, construct_scales, parse_lora

router = APIRouter()


@router.get("/lora-adapters")
async def get_lora_adapters(request: Request) -> list[dict[str, Any]]:
    state: ServerState = request.app.state.llama
    if state.ctx is None:
        raise APIError(503, "Loading model")
    return adapters_json(state.ctx)


@router.post("/lora-adapters", include_in_schema=False)  # a free-form body, llama-server's checks
async def post_lora_adapters(request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.llama
    if state.ctx is None:
        raise APIError(503, "Loading model")
    body = await json_body(request, list, "Request body must be an array")
    lora = state.ctx.model.lora
    n = len(lora.adapters) if lora is not None else 0
    try:
        scales = parse_lora(body, n, "body")
    except LoraRequestError as e:
        raise APIError(400, str(e)) from None
    if lora is not None:
        state.ctx.lora_scales = construct_scales(scales, n)  # one assignment: the scheduler reads it whole
    return {"success": True}
