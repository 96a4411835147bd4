"""The server's LoRA scales (llama-server's parse_lora_request / construct_lora_list): a list
of {id, scale} becomes one scale per loaded adapter, the ids not in the list at 0.  The global
scales (POST /lora-adapters) are Context.lora_scales; a request's own `lora` (or, without one,
the global scales when its slot starts) become its slot's sequence's scales, so slots with
different adapters share a batch.  A slot whose cached cells were computed with other scales
drops them (llama-server's slot.prompt.clear())."""
from __future__ import annotations

from typing import Any

from .slots import Slot


class LoraRequestError(ValueError):
    """A bad `lora` list: the message names the ids or the entry (a 400)."""


def parse_lora(entries: Any, n_adapters: int, where: str = "lora") -> dict[int, float]:
    """[{id, scale}, ...] -> {id: scale}, checked against the loaded adapters' count."""
    out = lora_entries(entries, where)
    check_ids(out, n_adapters, where)
    return out


def lora_entries(entries: Any, where: str = "lora") -> dict[int, float]:
    """[{id, scale}, ...] -> {id: scale} (a later entry for an id wins, as llama-server's map);
    a missing scale is 0 (its json_value default)."""
    if not isinstance(entries, list):
        raise LoraRequestError(f"{where}: expected an array of objects with 'id' and 'scale' fields")
    out: dict[int, float] = {}
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("id"), int) or isinstance(e.get("id"), bool):
            raise LoraRequestError(f"{where}: each entry needs an integer 'id' (got {e!r})")
        scale = e.get("scale", 0.0)
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale != scale or abs(scale) == float("inf"):
            raise LoraRequestError(f"{where}: adapter {e['id']}: 'scale' must be a finite number (got {scale!r})")
        out[e["id"]] = float(scale)
    return out


def check_ids(lora: dict[int, float], n_adapters: int, where: str = "lora") -> None:
    bad = sorted(i for i in lora if not 0 <= i < n_adapters)
    if bad:
        have = f"ids 0..{n_adapters - 1}" if n_adapters else "none (start the server with --lora FNAME)"
        raise LoraRequestError(f"{where}: invalid adapter id(s) {bad}: the server has {n_adapters} LoRA adapter(s), {have}")


def construct_scales(lora: dict[int, float], n_adapters: int) -> tuple[float, ...]:
    """One scale per adapter: the listed ones, the others 0 (construct_lora_list)."""
    return tuple(lora.get(i, 0.0) for i in range(n_adapters))


def bind_slot_lora(ctx: Any, slot: Slot, lora: dict[int, float] | None) -> None:
    """At a request's start: its slot's sequence takes the request's scales (or the global
    ones); cached cells made with other scales are dropped."""
    if ctx.model.lora is None:
        return
    scales = construct_scales(lora, len(ctx.model.lora.adapters)) if lora else tuple(ctx.lora_scales)
    if slot.lora is not None and slot.lora != scales and slot.cache_tokens:
        ctx.memory.seq_rm(slot.id, -1, -1)
        slot.cache_tokens = []
    slot.lora = scales
    ctx.seq_lora_scales[slot.id] = scales


def adapters_json(ctx: Any) -> list[dict[str, Any]]:
    """GET /lora-adapters: [{id, path, scale, task_name, prompt_prefix}] (llama-server's)."""
    if ctx is None or ctx.model.lora is None:
        return []
    return [{"id": i, "path": ad.path, "scale": ctx.lora_scales[i], "task_name": "", "prompt_prefix": ""}
            for i, ad in enumerate(ctx.model.lora.adapters)]
