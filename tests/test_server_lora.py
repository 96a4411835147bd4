"""The server's LoRA adapters (server/lora_scales.py, server/http_lora.py): GET / POST
/lora-adapters as llama-server answers them, a request's own `lora` (ids not listed at 0),
bad ids and scales refused with a 400 naming them, and requests with different adapters in
ONE batch each giving the tokens of a one-shot greedy run with their scales."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from llamapy import Context, ContextParams, Model
from llamapy.batch import Batch
from llamapy.sampling import SamplingParams
from llamapy.server.request import Request
from llamapy.server.scheduler import Scheduler
from server_harness import asgi_call, serving_state, step_all

ROOT = Path(__file__).resolve().parent.parent
N = 10  # tokens generated per request
PROMPT = "the cat sat on"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Model:
    """The tiny base with adapters a (scale 1) and b (scale 0) loaded."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from ref_lora_llamacpp import write_files

    base, paths, _ = write_files(tmp_path_factory.mktemp("lora"))
    m = Model.load(base)
    m.add_loras([(str(paths["a"]), 1.0), (str(paths["b"]), 0.0)])
    return m


def one_shot(model: Model, scales: tuple[float, ...], prompt: list[int], n: int = N) -> list[int]:
    """Greedy tokens of a fresh context whose global scales are `scales` (EOG never chosen,
    as ignore_eos)."""
    ctx = Context(model, ContextParams(n_ctx=256, n_batch=64, n_ubatch=64))
    ctx.lora_scales = scales
    b = Batch()
    for i, t in enumerate(prompt):
        b.add(t, i, [0], i == len(prompt) - 1)
    out: list[int] = []
    for k in range(n):
        ctx.decode(b)
        lg = ctx.get_logits_ith(len(b.token) - 1).clone()
        for t in range(model.n_vocab):
            if model.tokenizer.is_eog(t):
                lg[t] = -torch.inf
        out.append(int(lg.argmax()))
        b = Batch()
        b.add(out[-1], len(prompt) + k, [0], True)
    return out


def _completion(state, **kw) -> dict:
    r = asgi_call(state, "POST", "/completion", json={"prompt": PROMPT, "n_predict": N, "temperature": 0,
                                                      "ignore_eos": True, "cache_prompt": True, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_lora_adapters_routes(model):
    """GET lists the adapters with their global scales; POST sets them (unlisted: 0); bad ids,
    scales and bodies are 400s naming them, with nothing changed; a request's own lora
    decides its output, and equals the one-shot run with those scales."""
    with serving_state(model, n_ctx=512, np_=2) as state:
        got = asgi_call(state, "GET", "/lora-adapters").json()
        assert [(e["id"], Path(e["path"]).name, e["scale"]) for e in got] == [(0, "lora-a.gguf", 1.0), (1, "lora-b.gguf", 0.0)]
        for body, msg in (([{"id": 5, "scale": 1.0}], "invalid adapter id(s) [5]"), ({"id": 0}, "must be an array"),
                          ([{"id": 0, "scale": "x"}], "'scale' must be a finite number"), ([{"scale": 1}], "integer 'id'")):
            r = asgi_call(state, "POST", "/lora-adapters", json=body)
            assert r.status_code == 400 and msg in r.json()["error"]["message"], (body, r.text)
        assert [e["scale"] for e in asgi_call(state, "GET", "/lora-adapters").json()] == [1.0, 0.0]
        ids = model.tokenize(PROMPT)
        want = {s: model.detokenize(one_shot(model, (s, 0.0), ids)) for s in (0.0, 0.5, 1.0)}
        assert len(set(want.values())) == 3, want  # the scales change the greedy text
        assert _completion(state)["content"] == want[1.0]  # the global scales (a at 1)
        r = asgi_call(state, "POST", "/lora-adapters", json=[{"id": 0, "scale": 0.5}])
        assert r.status_code == 200 and r.json() == {"success": True}
        assert [e["scale"] for e in asgi_call(state, "GET", "/lora-adapters").json()] == [0.5, 0.0]
        assert _completion(state)["content"] == want[0.5]
        assert _completion(state, lora=[{"id": 0, "scale": 1.0}])["content"] == want[1.0]  # the request's own
        assert _completion(state, lora=[{"id": 1, "scale": 0.0}])["content"] == want[0.0]  # a unlisted: 0
        assert _completion(state)["content"] == want[0.5]  # the global ones again (the cached cells dropped)
        for lora, msg in (([{"id": 7, "scale": 1.0}], "invalid adapter id(s) [7]"), ("x", "expected an array"),
                          ([{"id": 0, "scale": None}], "'scale' must be a finite number")):
            r = asgi_call(state, "POST", "/completion", json={"prompt": PROMPT, "n_predict": 2, "lora": lora})
            assert r.status_code == 400 and msg in r.json()["error"]["message"], (lora, r.text)
        r = asgi_call(state, "POST", "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                  "max_tokens": 2, "lora": [{"id": 3, "scale": 1}]})
        assert r.status_code == 400 and "[3]" in r.json()["error"]["message"]


def test_different_adapters_in_one_batch(model):
    """Three requests (adapter a at 1; a at 0.5 with b at -1.5; the global scales, a at 1 set to
    0.25 here) stepped together: every step's batch holds all three sequences, and each
    request's tokens equal the one-shot run with its scales."""
    ctx = Context(model, ContextParams(n_ctx=768, n_batch=256, n_ubatch=256, n_seq_max=3, kv_unified=True))
    ctx.lora_scales = (0.25, 0.0)
    sched = Scheduler(ctx, max_queue=0)
    seqs_per_batch: list[set[int]] = []
    real = ctx.decode
    ctx.decode = lambda b: (seqs_per_batch.append({s[0] for s in b.seq_id}), real(b))[1]
    ids = model.tokenize(PROMPT)
    cases = [({0: 1.0}, (1.0, 0.0)), ({0: 0.5, 1: -1.5}, (0.5, -1.5)), (None, (0.25, 0.0))]
    evs: list[list] = [[] for _ in cases]
    for (lora, _), ev in zip(cases, evs):
        sched.submit(Request(list(ids), max_tokens=N, sampling=SamplingParams(temp=0.0), ignore_eos=True, lora=lora,
                             sink=ev.append))
    step_all(sched, evs)
    assert len(seqs_per_batch) >= N and all(s == {0, 1, 2} for s in seqs_per_batch[:N])
    outs = [[e.token for e in ev if e.token >= 0] for ev in evs]
    for out, (_, scales) in zip(outs, cases):
        assert out == one_shot(model, scales, ids), scales
    assert len({tuple(o) for o in outs}) == 3


def test_serve_process_lora_flags(tmp_path):
    """`llamapy serve --lora A --lora-scaled B:0.5 --lora-init-without-apply`: both loaded at
    scale 0 (GET), POST turns A on and the greedy text is the one-shot run's at that scale; a
    bad adapter stops the server before it listens, naming the tensor."""
    import subprocess

    import httpx
    from test_server_cli import _MAIN, _start
    from tiny_lora import write_tiny_lora

    sys.path.insert(0, str(ROOT / "scripts"))
    from ref_lora_llamacpp import write_files

    base, paths, _ = write_files(tmp_path)
    proc, url, _ = _start(["-m", str(base), "-c", "256", "-np", "1", "--port", "0", "-t", "1", "--no-webui",
                           "--lora", str(paths["a"]), "--lora-scaled", f"{paths['b']}:0.5", "--lora-init-without-apply"])
    try:
        with httpx.Client(base_url=url, timeout=60) as c:
            assert [(e["id"], e["scale"]) for e in c.get("/lora-adapters").json()] == [(0, 0.0), (1, 0.0)]
            assert c.post("/lora-adapters", json=[{"id": 0, "scale": 1.0}]).json() == {"success": True}
            r = c.post("/completion", json={"prompt": PROMPT, "n_predict": N, "temperature": 0, "ignore_eos": True}).json()
    finally:
        proc.terminate()
        proc.wait(30)
    m = Model.load(base)
    m.add_loras([(str(paths["a"]), 1.0), (str(paths["b"]), 0.0)])
    assert r["content"] == m.detokenize(one_shot(m, (1.0, 0.0), m.tokenize(PROMPT)))
    bad = write_tiny_lora(tmp_path / "bad.gguf", base, targets=(), output=False,
                          extra={"blk.0.attn_q.weight": ((4, 32), (64, 4))})
    p = subprocess.run([sys.executable, "-c", _MAIN, "serve", "-m", str(base), "--port", "0", "--lora", str(bad)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode != 0 and "tensor 'blk.0.attn_q.weight' has incorrect shape" in p.stdout, p.stdout[-2000:]
