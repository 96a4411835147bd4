"""POST /slots/{id_slot}?action=save|restore|erase (llama-server's slot actions; the work is
server/slot_files.py's, on the scheduler thread).  Needs --slot-save-path (501 without, as
llama-server); save and restore take {"filename": NAME}, a plain file name in that folder
(anything that could leave it is a 400 "Invalid filename")."""
from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request

from .api_error import APIError, json_body
from .bridge import ServerState
from .slot_files import ACTIONS, SlotAction, SlotActionError, valid_filename

router = APIRouter()


@router.post("/slots/{id_slot}", include_in_schema=False)  # a free-form body, llama-server's checks
async def slot_action(id_slot: str, request: Request, action: str = "") -> dict[str, Any]:
    state: ServerState = request.app.state.llama
    if state.slot_save_path is None:
        raise APIError(501, "This server does not support slots action. Start it with `--slot-save-path`")
    try:
        n = int(id_slot)
    except ValueError:
        raise APIError(400, f"Invalid slot ID: {id_slot!r}") from None
    if action not in ACTIONS:
        raise APIError(400, f"Invalid action: {action!r} (action=save, restore or erase)")
    if state.scheduler is None:
        raise APIError(503, "Loading model")
    n_slots = len(state.scheduler.slots)
    if n < 0:
        raise APIError(400, f"Invalid slot ID: {n} (the server has {n_slots} slots, -np)")
    a = SlotAction(action, n % n_slots)  # llama-server's get_slot_by_id wraps around
    if action != "erase":
        body = await _body(request)
        name = body.get("filename")
        if not isinstance(name, str) or not valid_filename(name):
            raise APIError(400, f"Invalid filename: {name!r} (a plain file name in --slot-save-path)")
        a.path = state.slot_save_path / name
    return await _run(state, a)


async def _body(request: Request) -> dict[str, Any]:
    return await json_body(request, dict, 'body: expected {"filename": NAME}')


async def _run(state: ServerState, a: SlotAction) -> dict[str, Any]:
    """Hand the action to the scheduler thread and wait for its result (it waits there until
    the slot is idle)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(result: dict[str, Any] | None, err: SlotActionError | None) -> None:
        if not fut.done():
            fut.set_exception(err) if err is not None else fut.set_result(result)

    a.done = lambda r, e: loop.call_soon_threadsafe(settle, r, e)
    state.scheduler.submit_slot_action(a)
    try:
        return await fut
    except SlotActionError as e:
        raise APIError(e.status, str(e)) from None
