"""Pipeline parallelism (--pp): a model split by layers across local processes over gloo.
The logits equal the single process's on mixed-sequence batches, after seq_rm / seq_cp,
across a K-shift, with several ubatches in flight, for SmolLM2 and Gemma 3 (splits inside and
at the edge of its sliding-window layers); the per-stage memory estimate equals what each
stage allocates; bad configurations fail before any weight loads; a lost stage fails the
decode with a clear error within --pp-timeout and leaves no process behind."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from llamapy import Batch, Context, ContextParams
from llamapy.model.model import Model
from llamapy.pipeline import PipelineConfigError, PipelineParams, StageError, open_context, split_layers
from llamapy.pipeline.estimate import estimate_stages

TEXT = ("The river flows past the old mill, where the miller's daughter counts the sacks of flour "
        "and the cat sleeps in the warm sun by the door.")


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_split_layers_equal_and_proportional():
    assert [(s.il0, s.il1) for s in split_layers(30, 2)] == [(0, 15), (15, 30)]
    assert [(s.il0, s.il1) for s in split_layers(18, 3)] == [(0, 6), (6, 12), (12, 18)]
    assert [(s.il0, s.il1) for s in split_layers(30, 2, [3, 1])] == [(0, 23), (23, 30)]
    st = split_layers(7, 3)
    assert sum(s.n_layer for s in st) == 7 and st[0].first and st[-1].last and not st[1].first and not st[1].last


@pytest.mark.parametrize("args,msg", [
    ((30, 31, None), r"--pp 31 is larger than the model's 30 layers"),
    ((30, 2, [1, 1, 1]), r"--tensor-split has 3 parts but --pp is 2"),
    ((30, 3, [1, 0, 1]), r"leaves stage 1 without layers"),
    ((30, 2, [100, 1]), r"leaves stage 1 without layers"),
])
def test_split_layers_errors(args, msg):
    with pytest.raises(PipelineConfigError, match=msg):
        split_layers(*args)


def test_cli_bad_config_one_line_before_load(smollm2_path):
    """(In a process of its own: the CLI sets up logging on the stderr it finds.)"""
    import subprocess
    import sys

    for argv, msg in ((["--pp", "31"], "--pp 31 is larger than the model's 30 layers"),
                      (["--pp", "2", "-ts", "1,2,3"], "--tensor-split has 3 parts but --pp is 2"),
                      (["--pp", "3", "-ts", "1,0,1"], "leaves stage 1 without layers")):
        r = subprocess.run([sys.executable, "-m", "llamapy", "run", "-m", str(smollm2_path), "-n", "1", *argv],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and msg in err[0]  # one line, nothing loaded before it


def _script(ctx, model) -> list[torch.Tensor]:
    """Mixed-sequence batches, seq_cp, seq_rm, and a seq_add (K-shift), the logits of each decode."""
    toks = model.tokenize(TEXT)
    n = len(toks)
    out = []
    b = Batch()
    for i, t in enumerate(toks):
        b.add(t, i, [0], i % 5 == 0 or i == n - 1)
    for i, t in enumerate(toks[:11]):
        b.add(t, i, [1], i == 10)
    ctx.decode(b)
    out.append(ctx.get_logits().clone())
    ctx.memory.seq_cp(0, 2, -1, -1)
    ctx.memory.seq_rm(1, 6, -1)
    b = Batch()
    b.add(toks[3], n, [0], True)
    b.add(toks[4], 6, [1], True)
    b.add(toks[5], n, [2], True)
    ctx.decode(b)
    out.append(ctx.get_logits().clone())
    ctx.memory.seq_rm(0, 2, 6)
    ctx.memory.seq_add(0, 6, -1, -4)  # K-shift at the next decode
    b = Batch()
    for j in range(3):
        b.add(toks[7 + j], n + 1 - 4 + j, [0], True)
    b.add(toks[9], n + 1, [2], True)
    ctx.decode(b)
    out.append(ctx.get_logits().clone())
    return out


CASES = [("smollm2", 2, None, 512), ("smollm2", 3, None, 4), ("gemma3", 2, (5, 13), 7), ("gemma3", 3, None, 512),
         ("qwen2", 2, None, 4), ("qwen3", 2, None, 512)]


@pytest.fixture(scope="module")
def qwen2_path(tmp_path_factory):
    """A tiny Qwen2 (Q/K/V biases, its own output matrix on the last stage)."""
    from tiny_family import Q8_0, write_tiny_family

    return write_tiny_family(tmp_path_factory.mktemp("pp") / "qwen2.gguf", "qwen2", Q8_0)


@pytest.fixture(scope="module")
def qwen3_path(tmp_path_factory):
    """A tiny Qwen3 (Q/K norms; tied output: the last stage holds token_embd too)."""
    from tiny_family import Q8_0, write_tiny_family

    return write_tiny_family(tmp_path_factory.mktemp("pp") / "qwen3.gguf", "qwen3", Q8_0)


@pytest.mark.slow
@pytest.mark.parametrize("which,pp,ts,ub", CASES, ids=[f"{w}-pp{p}-ub{u}" for w, p, _, u in CASES])
def test_pipeline_logits_equal_single_process(which, pp, ts, ub, request):
    """pp 2 and 3, several ubatches per batch (-ub 4 / 7): every logit within 1e-5 of one
    process's.  Gemma 3 (18 layers, every sixth global): --tensor-split 5,13 puts the edge
    inside the window layers (stage 0 holds no global layer), pp 3 at a global layer."""
    path = request.getfixturevalue(f"{which}_path")
    params = ContextParams(n_ctx=512, n_batch=512, n_ubatch=ub, n_seq_max=3, kv_unified=True, n_threads=1)
    model, ctx = open_context(path, params, PipelineParams(pp=pp, tensor_split=ts, timeout_s=60))
    try:
        got = _script(ctx, model)
        assert ctx.stats.n_ubatches > ctx.stats.n_decode_calls or ub == 512
    finally:
        ctx.close()
    ref_model = Model.load(path)
    want = _script(Context(ref_model, params), ref_model)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert torch.allclose(g, w, atol=1e-5, rtol=0), (g - w).abs().max()
    assert all(p.returncode == 0 for p in ctx.pipe.procs)  # stopped cleanly, reaped


@pytest.mark.slow
def test_stage_memory_equals_estimate(gemma3_path):
    """Each stage's resident weights and K / V bytes are what estimate_stages predicts."""
    params = ContextParams(n_ctx=1024, n_ubatch=128, n_seq_max=2, n_threads=1)
    pipe = PipelineParams(pp=3, tensor_split=(2, 1, 1))
    model, ctx = open_context(gemma3_path, params, pipe)
    try:
        got = ctx.stage_memory()
    finally:
        ctx.close()
    est = estimate_stages(gemma3_path, params, ctx.stages, n_ctx_fitted=ctx.n_ctx)
    assert len(got) == len(est) == 3
    for g, e in zip(got, est):
        assert (g["weights"], g["kv_k"], g["kv_v"]) == (e.est.weights, e.est.kv_k, e.est.kv_v)
    assert sum(e.est.kv for e in est) == Context(Model.load(gemma3_path), params).estimate.kv  # the shares add up
    assert est[1].est.output == 0 and est[2].est.output > 0 and est[1].activations == 2 * est[0].activations


def _tiny_pipeline(tiny_path, timeout_s: float):
    params = ContextParams(n_ctx=256, n_ubatch=64, n_threads=1)
    return open_context(tiny_path, params, PipelineParams(pp=2, timeout_s=timeout_s))


def _decode_one(ctx, model, pos: int = 0) -> None:
    b = Batch()
    b.add(model.tokenize("hi")[0], pos, [0], True)
    ctx.decode(b)


def test_killed_stage_fails_decode(tiny_path):
    model, ctx = _tiny_pipeline(tiny_path, 30)
    _decode_one(ctx, model)
    proc = ctx.pipe.procs[0]
    proc.kill()
    proc.wait()
    t0 = time.monotonic()
    with pytest.raises(StageError, match=r"pipeline stage 1 is gone"):
        _decode_one(ctx, model, 1)
    assert time.monotonic() - t0 < 5
    assert "stage 1" in ctx.health_error()
    with pytest.raises(StageError, match=r"stage 1"):  # and every later call, at once
        _decode_one(ctx, model, 1)
    ctx.memory.seq_rm(0)  # freeing a slot still works on stage 0
    ctx.close()


def test_stopped_stage_times_out(tiny_path):
    """A stage that stops answering (SIGSTOP): the decode fails after --pp-timeout, the stage
    is killed and reaped."""
    model, ctx = _tiny_pipeline(tiny_path, 2)
    _decode_one(ctx, model)
    proc = ctx.pipe.procs[0]
    os.kill(proc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(StageError, match=r"stopped answering.*--pp-timeout 2 s"):
        _decode_one(ctx, model, 1)
    assert 1.5 < time.monotonic() - t0 < 10
    assert proc.returncode is not None  # killed and reaped: no zombie
    ctx.close()


def test_stage_load_error_is_the_models_own(tmp_path, tiny_path):
    """A stage that cannot load reports the model's message, not a stack dump; nothing is left running."""
    import shutil

    bad = tmp_path / "m.gguf"
    shutil.copy(tiny_path, bad)
    from llamapy.pipeline.launch import Pipeline
    from llamapy.pipeline.context import PipelineContext

    stages = split_layers(2, 2)
    pipe = Pipeline.start(2, 30)
    model = Model.load(bad, stage=stages[0])
    bad.write_bytes(b"GGUF" + b"\0" * 64)  # the other stage opens the file after stage 0 did
    with pytest.raises(StageError, match=r"pipeline stage 1 \(layers 1-1\) could not start: GGUFError: .*m\.gguf"):
        PipelineContext(model, ContextParams(n_ctx=256, n_threads=1), pipe, stages)
    assert all(p.returncode is not None for p in pipe.procs)


@pytest.mark.slow
def test_server_scheduler_pp2_same_outputs(smollm2_path, smollm2):
    """8 concurrent greedy requests through the server's scheduler (-np 8, one KV stream per
    slot, prompt chunks beside decode rows): the same tokens with --pp 2 as in one process."""
    from server_harness import step_all

    from llamapy.sampling import SamplingParams
    from llamapy.server.request import Request
    from llamapy.server.scheduler import Scheduler

    prompts = [TEXT, "The history of the bicycle begins in", "List the days of the week: Monday, Tuesday,",
               "def add(a, b):\n    return", "Paris is the capital of", "Once upon a time, in a small village,",
               "The three primary colors are", "Water boils at"]
    params = ContextParams(n_ctx=8 * 256, n_batch=256, n_ubatch=64, n_seq_max=8, kv_unified=False, n_threads=1)

    def serve(model, ctx) -> list[list[int]]:
        s = Scheduler(ctx)
        evs = []
        for p in prompts:
            ev: list = []
            s.submit(Request(prompt=model.tokenize(p), max_tokens=16, sampling=SamplingParams(temp=0.0), sink=ev.append))
            evs.append(ev)
        step_all(s, evs, 2000)
        return [[x.token for x in e if not x.final] for e in evs]

    model, ctx = open_context(smollm2_path, params, PipelineParams(pp=2))
    try:
        got = serve(model, ctx)
    finally:
        ctx.close()
    assert got == serve(smollm2, Context(smollm2, params))
    assert all(len(t) == 16 for t in got)


@pytest.mark.slow
def test_serve_pp2_lost_stage(tiny_path, tmp_path):
    """`llamapy serve --pp 2`: answers; after its stage 1 is killed a request ends with the
    stage's error and /health is 503 with it; the server itself stays up."""
    import subprocess
    import sys

    import httpx

    log = tmp_path / "serve.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "llamapy", "serve", "-m", str(tiny_path), "-c", "512", "-np", "2",
                                 "--port", "0", "-t", "1", "--pp", "2", "--pp-timeout", "5"],
                                stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        base = None
        for _ in range(600):
            m = [ln for ln in log.read_text().splitlines() if ln.startswith("ready: http://127.0.0.1:")]
            if m:
                base = m[0].split("ready: ")[1].strip()
                break
            time.sleep(0.1)
        assert base, log.read_text()
        r = httpx.post(f"{base}/completion", json={"prompt": "hello", "n_predict": 4, "temperature": 0}, timeout=30)
        assert r.status_code == 200 and r.json()["tokens_predicted"] == 4
        assert httpx.get(f"{base}/health").json() == {"status": "ok"}
        from proc_tree import children

        stages = children(proc.pid, "llamapy.pipeline.stage")
        assert len(stages) == 1, stages
        stage = stages[0]
        os.kill(stage, signal.SIGKILL)
        r = httpx.post(f"{base}/completion", json={"prompt": "hello", "n_predict": 4, "temperature": 0}, timeout=30)
        assert "pipeline stage 1 is gone" in r.text
        h = httpx.get(f"{base}/health")
        assert h.status_code == 503 and "pipeline stage 1" in h.json()["error"]["message"]
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_run_pp2_greedy_identical(smollm2_path):
    """`llamapy run --pp 2` prints what `llamapy run` prints (greedy), and leaves no stage running."""
    import subprocess
    import sys

    from proc_tree import new_tag_env, wait_gone

    tag, env = new_tag_env()  # the runs' own processes carry it (the stages inherit it)

    def run(*extra: str) -> str:
        r = subprocess.run([sys.executable, "-m", "llamapy", "run", "-m", str(smollm2_path), "-p", "The capital of France is",
                            "-n", "24", "--temp", "0", "-t", "1", "-c", "1024", *extra],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    plain = run()
    assert run("--pp", "2") == plain and len(plain) > 40
    assert run("--pp", "3", "-ub", "4", "-ts", "1,2,1") == plain
    left = wait_gone(tag, "llamapy.pipeline.stage", timeout_s=30)  # only this test's stages, however long they take
    assert not left, left


@pytest.mark.slow
def test_torchrun_ranks_are_the_stages(tiny_path):
    """Under torchrun (one host here, its c10d rendezvous) rank 0 runs the command and rank 1
    becomes stage 1: the output is `run`'s."""
    import shutil
    import subprocess
    import sys

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    args = ["run", "-m", str(tiny_path), "-p", "hello", "-n", "12", "--temp", "0", "-t", "1", "-c", "256"]
    plain = subprocess.run([sys.executable, "-m", "llamapy", *args], capture_output=True, text=True, timeout=120)
    r = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "llamapy", *args, "--pp", "2"],
                       capture_output=True, text=True, timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert plain.returncode == 0 and r.stdout == plain.stdout and plain.stdout.strip()


def test_fitter_fits_the_tightest_host(gemma3_path):
    """-c 0 with --pp: the largest n_ctx at which each host's stages fit its budget together
    (header only, no process started)."""
    from llamapy.memory.fit import MemoryBudgetError
    from llamapy.pipeline.estimate import fit_stages

    stages = split_layers(18, 2)
    p0 = ContextParams(n_ctx=0, n_seq_max=1)
    at = {n: [s.total for s in estimate_stages(gemma3_path, p0, stages, n_ctx_fitted=n)] for n in (8192, 8448)}
    one_host = sum(at[8192])  # both stages on one host: they share its budget
    assert fit_stages(gemma3_path, p0, stages, [("a", one_host), ("a", one_host)]) == 8192
    # each stage on a host of its own: stage 1's host is the tight one
    hosts = [("a", 10 * one_host), ("b", at[8192][1])]
    assert fit_stages(gemma3_path, p0, stages, hosts) == 8192
    hosts = [("a", 10 * one_host), ("b", at[8448][1])]
    assert fit_stages(gemma3_path, p0, stages, hosts) == 8448
    with pytest.raises(MemoryBudgetError, match=r"on host b .* budget is 1\.00 MiB"):
        fit_stages(gemma3_path, p0, stages, [("a", 10 * one_host), ("b", 1024 * 1024)])
    with pytest.raises(MemoryBudgetError, match=r"-c 16384 needs"):
        fit_stages(gemma3_path, ContextParams(n_ctx=16384, n_seq_max=1), stages, [("a", one_host), ("a", one_host)])
