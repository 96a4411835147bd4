"""llama-server's slot actions (POST /slots/{id}?action=save|restore|erase): a slot's cached
tokens and their KV cells written to a file under --slot-save-path, read back into a slot
(any slot: the cells go to that slot's sequence), or dropped.  Run on the scheduler thread
while the slot is idle (server/scheduler.py), so no decode sees a half-restored sequence.

The file is llamapy's own (llama.cpp's state layout is not reproduced): a numpy .npz, read
without pickle, holding a JSON header (format, version, the model's architecture, n_vocab,
layers and the caches' K/V types, so a file from another model or -ctk/-ctv is refused), the
tokens, and per KV cache the cells' positions, pending shifts and K/V rows
(memory/seq_state.py).  Restoring gives the slot those tokens as its prompt cache: the next
request sharing them decodes only the rest, and the same next tokens as before the save."""
from __future__ import annotations

import io
import json
import os
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..log import logger
from ..memory.seq_state import CacheState, SeqStateError, seq_state_get, seq_state_set
from .slots import Slot

log = logger("srv")
FORMAT, VERSION = "llamapy-slot", 1
ACTIONS = ("save", "restore", "erase")
_FORBIDDEN = set(':*?"<>|/\\') | {"\ufffd", "\ufeff", "\uff0e", "\u2215", "\u2216"}


class SlotActionError(ValueError):
    """A slot action that cannot be done: status (400, 404, 501) and a message naming why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def valid_filename(name: str) -> bool:
    """llama.cpp's fs_validate_filename (no subdirectories): a plain file name, never a path.
    Refuses empty names and ones over 255 bytes, control characters, path separators and
    their Unicode look-alikes, the characters Windows forbids, surrogates, U+FFFD, a BOM, a
    leading or trailing space, a trailing dot, any "..", and "."."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > 255:
        return False
    for ch in name:
        c = ord(ch)
        if c <= 0x1F or c == 0x7F or 0x80 <= c <= 0x9F or 0xD800 <= c <= 0xDFFF or ch in _FORBIDDEN:
            return False
    return not (name[0] == " " or name[-1] in " ." or ".." in name or name == ".")


@dataclass(slots=True)
class SlotAction:
    """One action for the scheduler thread; done(result, error) is called there when it ran."""

    action: str
    id_slot: int
    path: Path | None = None  # save / restore: the file (already checked to be under --slot-save-path)
    done: Callable[[dict[str, Any] | None, SlotActionError | None], None] = lambda r, e: None
    t_arrival: float = field(default_factory=time.perf_counter)


def _header(ctx, state: list[CacheState]) -> dict[str, Any]:
    m = ctx.model
    return {"format": FORMAT, "version": VERSION, "arch": m.hparams.arch, "n_vocab": m.n_vocab,
            "n_layer": m.hparams.n_layer, "caches": [{"type_k": c.type_k, "type_v": c.type_v, "layers": sorted(c.k)} for c in state]}


def save(ctx, slot: Slot, path: Path) -> dict[str, Any]:
    """Write the slot's tokens and cells to path (atomically: a temporary file renamed)."""
    t0 = time.perf_counter()
    try:
        state = seq_state_get(ctx.memory, slot.id)
    except SeqStateError as e:
        raise SlotActionError(str(e), 501) from None
    arrays: dict[str, np.ndarray] = {"header": np.frombuffer(json.dumps(_header(ctx, state)).encode(), dtype=np.uint8),
                                     "tokens": np.asarray(slot.cache_tokens, dtype=np.int32)}
    for i, cs in enumerate(state):
        arrays[f"c{i}_pos"], arrays[f"c{i}_shift"] = cs.pos, cs.shift
        for il in cs.k:
            arrays[f"c{i}_k{il}"], arrays[f"c{i}_v{il}"] = cs.k[il], cs.v[il]
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
    except OSError as e:
        raise SlotActionError(f"Unable to save slot: {e.strerror}: {path.name}", 500) from None
    return {"id_slot": slot.id, "filename": path.name, "n_saved": len(slot.cache_tokens), "n_written": buf.tell(),
            "timings": {"save_ms": (time.perf_counter() - t0) * 1000}}


def _load(path: Path) -> tuple[dict[str, Any], np.ndarray, list[CacheState], int]:
    """The file's header, tokens and cache states; SlotActionError for a missing or foreign file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SlotActionError(f"Unable to restore slot: no file {path.name!r} in --slot-save-path") from None
    except OSError as e:
        raise SlotActionError(f"Unable to restore slot: {e.strerror}: {path.name}") from None
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            head = json.loads(z["header"].tobytes())
            if head.get("format") != FORMAT or head.get("version") != VERSION:
                raise ValueError(f"not a {FORMAT} v{VERSION} file")
            states = [CacheState(c["type_k"], c["type_v"], z[f"c{i}_pos"], z[f"c{i}_shift"],
                                 {il: z[f"c{i}_k{il}"] for il in c["layers"]}, {il: z[f"c{i}_v{il}"] for il in c["layers"]})
                      for i, c in enumerate(head["caches"])]
            return head, z["tokens"], states, len(raw)
    except (ValueError, KeyError, TypeError, OSError, EOFError, zipfile.BadZipFile) as e:  # a zip/npy/JSON that is not ours
        raise SlotActionError(f"Unable to restore slot: invalid slot save file {path.name!r} ({e})") from None


def restore(ctx, slot: Slot, path: Path) -> dict[str, Any]:
    """Read path into the slot: its cells replace the slot's, its tokens become the slot's
    prompt cache.  On any error the slot is left empty (as llama-server's prompt_clear)."""
    t0 = time.perf_counter()
    m = ctx.model
    try:
        head, tokens, states, n_read = _load(path)
        if (head.get("arch"), head.get("n_vocab"), head.get("n_layer")) != (m.hparams.arch, m.n_vocab, m.hparams.n_layer):
            raise SlotActionError(f"Unable to restore slot: the file was saved with {head.get('arch')} (n_vocab {head.get('n_vocab')}, "
                                  f"{head.get('n_layer')} layers); this server runs {m.hparams.arch} (n_vocab {m.n_vocab}, {m.hparams.n_layer} layers)")
        if len(tokens) > slot.n_ctx:
            raise SlotActionError(f"Unable to restore slot: {len(tokens)} tokens do not fit the slot's {slot.n_ctx} (-c / -np)")
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= m.n_vocab):
            raise SlotActionError("Unable to restore slot: invalid tokens in slot save file")
        if states and states[0].n_cells != len(tokens):
            raise SlotActionError(f"Unable to restore slot: {len(tokens)} tokens but {states[0].n_cells} cells in the file")
        try:
            seq_state_set(ctx.memory, slot.id, states)
        except SeqStateError as e:
            raise SlotActionError(f"Unable to restore slot: {e}") from None
    except SlotActionError:
        erase(ctx, slot)
        raise
    slot.cache_tokens = tokens.tolist()
    slot.t_last = time.perf_counter()
    return {"id_slot": slot.id, "filename": path.name, "n_restored": len(slot.cache_tokens), "n_read": n_read,
            "timings": {"restore_ms": (time.perf_counter() - t0) * 1000}}


def erase(ctx, slot: Slot) -> dict[str, Any]:
    """Drop the slot's prompt cache: its tokens and cells."""
    n = len(slot.cache_tokens)
    ctx.memory.seq_rm(slot.id, -1, -1)
    slot.cache_tokens = []
    return {"id_slot": slot.id, "n_erased": n}


def run(ctx, slots: list[Slot], a: SlotAction) -> dict[str, Any]:
    """Do one action on its (idle) slot."""
    slot = slots[a.id_slot]
    if a.action == "save":
        return save(ctx, slot, a.path)
    if a.action == "restore":
        return restore(ctx, slot, a.path)
    return erase(ctx, slot)


def run_ready(ctx, slots: list[Slot], pending: list[SlotAction]) -> bool:
    """Run (and take out of pending) the actions whose slot is idle, in arrival order
    (llama-server defers one whose slot is busy until it is released).  True if any ran."""
    ready = [a for a in pending if slots[a.id_slot].is_idle]
    for a in ready:
        pending.remove(a)
        try:
            a.done(run(ctx, slots, a), None)
        except SlotActionError as e:
            a.done(None, e)
        except Exception as e:  # noqa: BLE001 - a bug: this action fails, the server goes on
            log.exception("slot action %s on slot %d failed", a.action, a.id_slot)
            a.done(None, SlotActionError(f"internal error: {e}", 500))
    return bool(ready)
