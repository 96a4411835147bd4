"""Slot save / restore / erase (POST /slots/{id}?action=..., --slot-save-path) on SmolLM2, split
and unified caches: a restored slot decodes only the last prompt token and gives the same
greedy text; erase makes the next request decode its whole prompt; id_slot picks the slot;
file names that could leave the folder, foreign files and another model's files are refused
(the slot left empty and usable); an action on a busy slot waits until it is idle."""
from __future__ import annotations

import pytest
from server_harness import asgi_call, serving_state

from llamapy import Context, ContextParams
from llamapy.sampling import SamplingParams
from llamapy.server.request import Request
from llamapy.server.scheduler import Scheduler
from llamapy.server.slot_files import SlotAction, valid_filename

pytestmark = pytest.mark.slow
PROMPT = "The capital of France is Paris. The capital of Germany is"
OTHER = "Once upon a time, in a small village by the sea, there lived"


@pytest.fixture(scope="module", params=[False, True], ids=["split", "unified"])
def state(smollm2, request, tmp_path_factory):
    with serving_state(smollm2, n_ctx=1024, np_=2, unified=request.param) as st:
        st.slot_save_path = tmp_path_factory.mktemp("slots")
        yield st


def _post(state, path: str, body: dict | None = None):
    return asgi_call(state, "POST", path, json=body) if body is not None else asgi_call(state, "POST", path)


def _complete(state, prompt: str, id_slot: int, n: int = 12) -> dict:
    r = _post(state, "/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "id_slot": id_slot, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def test_restore_gives_the_same_next_tokens(state) -> None:
    _post(state, "/slots/0?action=erase"), _post(state, "/slots/1?action=erase")
    n_prompt = len(_post(state, "/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"])
    first = _complete(state, PROMPT, 1)
    assert first["timings"]["prompt_n"] == n_prompt
    r = _post(state, "/slots/1?action=save", {"filename": "slot1.bin"})
    assert r.status_code == 200, r.text
    saved = r.json()
    assert saved["id_slot"] == 1 and saved["filename"] == "slot1.bin" and saved["n_saved"] == n_prompt + 12 - 1
    assert saved["n_written"] == (state.slot_save_path / "slot1.bin").stat().st_size and "save_ms" in saved["timings"]

    assert _complete(state, OTHER, 1)["timings"]["cache_n"] == 0  # slot 1 now holds another text
    r = _post(state, "/slots/0?action=restore", {"filename": "slot1.bin"})
    assert r.status_code == 200, r.text
    assert r.json()["n_restored"] == saved["n_saved"] and r.json()["n_read"] == saved["n_written"] and r.json()["id_slot"] == 0
    again = _complete(state, PROMPT, 0)
    assert again["timings"]["prompt_n"] == 1 and again["timings"]["cache_n"] == n_prompt - 1
    assert again["content"] == first["content"]
    longer = _complete(state, PROMPT, 0, n=20)  # the restored cells hold the generated tokens too: reused again
    assert longer["content"].startswith(first["content"]) and longer["timings"]["prompt_n"] == 1
    assert _complete(state, OTHER, 1)["timings"]["prompt_n"] == 1  # slot 1 untouched by the restore into slot 0
    slots = asgi_call(state, "GET", "/slots").json()
    assert slots[0]["n_tokens_cached"] == n_prompt + 20 - 1


def test_erase(state) -> None:
    n_prompt = _complete(state, PROMPT, 1)["tokens_evaluated"]
    assert _complete(state, PROMPT, 1)["timings"]["prompt_n"] == 1
    r = _post(state, "/slots/1?action=erase")
    assert r.status_code == 200 and r.json() == {"id_slot": 1, "n_erased": n_prompt + 12 - 1}, r.text
    assert _complete(state, PROMPT, 1)["timings"]["prompt_n"] == n_prompt
    assert _post(state, "/slots/3?action=erase").json()["id_slot"] == 1  # llama-server's id_slot wraps around


@pytest.mark.parametrize("name", ["../up.bin", "a/b.bin", "a\\b", "", ".", "x.", " x", "x ", "a..b", "nul\x00", "c:d", "x\u2215y"])
def test_file_names_that_could_leave_the_folder(state, name) -> None:
    assert not valid_filename(name)
    r = _post(state, "/slots/0?action=save", {"filename": name})
    assert r.status_code == 400 and "Invalid filename" in r.json()["error"]["message"], r.text
    assert not (state.slot_save_path.parent / "up.bin").exists()


def test_bad_requests_and_files(state, tmp_path) -> None:
    assert valid_filename("slot-1.bin") and valid_filename("état ü.bin")
    r = _post(state, "/slots/0?action=nap", {"filename": "x"})
    assert r.status_code == 400 and "Invalid action" in r.json()["error"]["message"]
    assert _post(state, "/slots/abc?action=erase").status_code == 400
    assert _post(state, "/slots/-1?action=erase").status_code == 400
    r = _post(state, "/slots/0?action=restore", {"filename": "missing.bin"})
    assert r.status_code == 400 and "missing.bin" in r.json()["error"]["message"], r.text
    (state.slot_save_path / "junk.bin").write_bytes(b"PK\x03\x04 not a slot file")
    _complete(state, PROMPT, 0)
    r = _post(state, "/slots/0?action=restore", {"filename": "junk.bin"})
    assert r.status_code == 400 and "invalid slot save file" in r.json()["error"]["message"], r.text
    assert asgi_call(state, "GET", "/slots").json()[0]["n_tokens_cached"] == 0  # a failed restore leaves the slot empty
    assert _complete(state, PROMPT, 0)["timings"]["cache_n"] == 0


def test_without_slot_save_path(smollm2) -> None:
    with serving_state(smollm2, n_ctx=256, np_=1) as st:
        r = _post(st, "/slots/0?action=erase")
        assert r.status_code == 501 and "--slot-save-path" in r.json()["error"]["message"]


def test_another_models_file_is_refused(tiny, smollm2, tmp_path) -> None:
    with serving_state(tiny, n_ctx=256, np_=1) as st:
        st.slot_save_path = tmp_path
        _complete(st, "hello there", 0, n=4)
        assert _post(st, "/slots/0?action=save", {"filename": "tiny.bin"}).status_code == 200
    with serving_state(smollm2, n_ctx=256, np_=1) as st:
        st.slot_save_path = tmp_path
        r = _post(st, "/slots/0?action=restore", {"filename": "tiny.bin"})
        assert r.status_code == 400 and "this server runs llama (n_vocab 49152" in r.json()["error"]["message"], r.text


def test_action_on_a_busy_slot_waits_and_id_slot(tiny, tmp_path) -> None:
    """A save of a generating slot runs when its request ends (all its tokens saved); a request
    for a busy slot waits while one behind it takes the idle slot."""
    ctx = Context(tiny, ContextParams(n_ctx=512, n_batch=64, n_ubatch=64, n_seq_max=2))
    sched = Scheduler(ctx)  # stepped here, not started
    evs: dict[str, list] = {"a": [], "b": [], "c": []}
    greedy = SamplingParams(temp=0.0)
    ra = Request([1, 2, 3, 4, 5], max_tokens=6, sampling=greedy, ignore_eos=True, id_slot=0, sink=evs["a"].append)
    sched.submit(ra)
    sched.update_slots()
    got: list = []
    sched.submit_slot_action(SlotAction("save", 0, tmp_path / "busy.bin", done=lambda r, e: got.append((r, e))))
    rb = Request([7, 8, 9], max_tokens=2, sampling=greedy, ignore_eos=True, id_slot=0, sink=evs["b"].append)
    rc = Request([9, 9, 9], max_tokens=2, sampling=greedy, ignore_eos=True, sink=evs["c"].append)
    sched.submit(rb)
    sched.submit(rc)
    sched.update_slots()
    assert sched.slots[1].request is rc and rb in sched.waiting  # c took slot 1; b waits for slot 0
    while not evs["a"] or not evs["a"][-1].final:
        assert not got
        sched.update_slots()
    sched.update_slots()
    assert got and got[0][1] is None and got[0][0]["n_saved"] == 5 + 6 - 1, got
    assert sched.slots[0].request is rb or (evs["b"] and evs["b"][-1].final)


def test_slot_save_path_flag(tmp_path) -> None:
    from llamapy.cli import build_parser
    from llamapy.cli.serve import serve_settings

    s = serve_settings(build_parser().parse_args(["serve", "--slot-save-path", str(tmp_path)]))
    s.check()
    assert s.slot_save_path == str(tmp_path)
    with pytest.raises(ValueError, match="--slot-save-path: not a directory"):
        serve_settings(build_parser().parse_args(["serve", "--slot-save-path", str(tmp_path / "nope")])).check()
