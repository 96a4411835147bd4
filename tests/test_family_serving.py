"""Issue 43's new architectures (qwen3moe, phi3, gemma2, gpt-oss; qwen2, qwen3 and llama 3 share
the llama path's code) through the parts that move cells: seq_cp / seq_rm with mixed-sequence
ubatches, speculative decoding (rejected drafts rolled back, past gemma2's and gpt-oss's 16-cell
window) and the server's scheduler with a draft model.  Tiny random models (tests/tiny_family.py):
each run is compared with the same model run plainly, never with hard-coded output."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from llamapy import Batch, Context, ContextParams
from llamapy.generate import generate
from llamapy.model.model import Model
from llamapy.sampling import Sampler, SamplingParams
from llamapy.server.request import Event, Request
from llamapy.server.scheduler import Scheduler
from llamapy.speculative import SpecParams, Speculator, make_speculator
from llamapy.speculative.proposer import make_proposers
from server_harness import step_all
from tiny_family import F16, write_tiny_family

ARCHS = ["qwen3moe", "phi3", "gemma2", "gpt-oss"]
PROMPT = "The quick brown fox jumps over"
N_GEN = 40  # past the 16-cell window of gemma2 / gpt-oss


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[tuple[str, int], Path]:
    """(arch, seed) -> a tiny F16 file; seed 1 is a draft model with the same vocabulary."""
    d = tmp_path_factory.mktemp("fam")
    return {(a, s): write_tiny_family(d / f"{a}-{s}.gguf", a, F16, seed=s) for a in ARCHS for s in (0, 1)}


def _cells(ctx: Context) -> list[tuple[int, tuple[int, ...]]]:
    """Every used cell's (position, sequences) of every cache, in position order."""
    mem = ctx.memory
    out = []
    for cache in (mem.caches if hasattr(mem, "caches") else (mem,)):
        for c in cache.cells:
            used = np.flatnonzero(c.pos >= 0)
            out += [(int(c.pos[i]), tuple(np.flatnonzero(c.seq[i]).tolist())) for i in used]
    return sorted(out)


CP = ContextParams(n_ctx=256, n_batch=64, n_ubatch=64)


def _gen(model: Model, spec: Speculator | None = None) -> tuple[list[int], Context]:
    ctx = Context(model, CP)
    ids = model.tokenize(PROMPT, add_special=True, parse_special=True)
    return list(generate(ctx, Sampler(SamplingParams(temp=0.0)), ids, N_GEN, spec=spec)), ctx


class HalfRightDraft:
    """Proposes the plain run's next 2 tokens, then 2 wrong ones: every verification accepts 2
    and rolls back the rest."""

    def __init__(self, n_prompt: int, plain: list[int]) -> None:
        self.n_prompt, self.plain = n_prompt, plain

    def draft(self, tokens: list[int], n_max: int) -> list[int]:
        n = len(tokens) - self.n_prompt  # tokens: the prompt and the tokens generated so far
        right = self.plain[n : n + 2]
        return (right + [t for t in (11, 12) if t not in self.plain[n + 2 : n + 4]])[:n_max]

    def accepted(self, tokens: list[int]) -> None:
        pass


@pytest.mark.parametrize("arch", ARCHS)
def test_speculative_greedy_unchanged(files, arch):
    """Rejected drafts rolled back (seq_rm on both caches of an iSWA model): the same tokens and
    the same cells as a run without speculation; a draft model of the same architecture: the
    same tokens, its own cache holding only accepted tokens."""
    model = Model.load(files[(arch, 0)])
    plain, ctx0 = _gen(model)
    n_prompt = len(model.tokenize(PROMPT, add_special=True, parse_special=True))
    sp = Speculator(HalfRightDraft(n_prompt, plain), 4)
    out, ctx1 = _gen(model, sp)
    assert out == plain and sp.n_accepted > 0 and sp.n_drafted > sp.n_accepted
    assert _cells(ctx1) == _cells(ctx0)
    spec = SpecParams(type="draft-simple", draft_model=str(files[(arch, 1)]), n_max=4)
    sp2 = make_speculator(spec, model, CP)
    out2, ctx2 = _gen(model, sp2)
    assert out2 == plain and sp2.n_drafted > 0
    assert _cells(ctx2) == _cells(ctx0)
    d = sp2.proposer
    assert d.ctx.memory.seq_pos_max(0) == len(d.cached) - 1


def _last_logits(ctx: Context, tokens: list[int], seq: int = 0, p0: int = 0) -> torch.Tensor:
    b = Batch()
    for i, t in enumerate(tokens):
        b.add(t, p0 + i, (seq,), logits=i == len(tokens) - 1)
    ctx.decode(b)
    return ctx.get_logits_ith(len(tokens) - 1).clone()


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("arch", ARCHS)
def test_seq_cp_seq_rm_mixed_ubatch(files, arch, deterministic):
    """A 20-token prefix on sequence 0 copied to sequence 1 (shared cells), one batch with a
    different next token for each (a mixed-sequence ubatch), then sequence 0 cut back with
    seq_rm and continued otherwise: each row's logits are a fresh context's for that token
    sequence: bit-equal with deterministic (every row computed as alone, one-row ubatches where
    the architecture has no fused layers), within float noise without it (the two rows in one
    ubatch)."""
    model = Model.load(files[(arch, 0)])
    cp = ContextParams(n_ctx=256, n_seq_max=2, kv_unified=True, deterministic=deterministic)
    prefix = model.tokenize(PROMPT * 3, add_special=True, parse_special=True)[:20]
    a, b, c = 101, 57, 200
    ctx = Context(model, cp)
    _last_logits(ctx, prefix)
    ctx.memory.seq_cp(0, 1, -1, -1)
    batch = Batch()
    batch.add(a, len(prefix), (0,), logits=True)
    batch.add(b, len(prefix), (1,), logits=True)
    ctx.decode(batch)
    got_a, got_b = ctx.get_logits_ith(0).clone(), ctx.get_logits_ith(1).clone()
    assert ctx.memory.seq_rm(0, len(prefix) - 2, -1)
    got_c = _last_logits(ctx, [c], 0, len(prefix) - 2)
    got_b2 = _last_logits(ctx, [a], 1, len(prefix) + 1)  # sequence 1 untouched by the cut
    for toks, got in ((prefix + [a], got_a), (prefix + [b], got_b), (prefix[:-2] + [c], got_c),
                      (prefix + [b, a], got_b2)):
        want = _last_logits(Context(model, cp), toks)
        err = (got - want).abs().max().item()
        assert err == 0 if deterministic else err < 1e-3, (arch, len(toks), err)


def _serve(model: Model, spec: SpecParams | None, prompts: list[str]) -> list[list[int]]:
    """The prompts submitted together to a 2-slot scheduler (one KV stream each), stepped
    synchronously: each one's greedy tokens."""
    params = ContextParams(n_ctx=512, n_batch=64, n_ubatch=64, n_seq_max=2, kv_unified=False)
    ctx = Context(model, params)
    s = Scheduler(ctx, spec, make_proposers(spec, model, params, 2) if spec is not None else None)
    evs: list[list[Event]] = []
    for p in prompts:
        ev: list[Event] = []
        ids = model.tokenize(p, add_special=True, parse_special=True)
        s.submit(Request(prompt=ids, max_tokens=24, sampling=SamplingParams(temp=0.0), sink=ev.append))
        evs.append(ev)
    step_all(s, evs, 2000)
    if spec is not None:
        assert s.metrics.n_draft_tokens > 0
    return [[x.token for x in e if not x.final] for e in evs]


@pytest.mark.parametrize("arch", ARCHS)
def test_server_draft_model_unchanged(files, arch):
    """Two requests at once through the server's scheduler, with and without a draft model of
    the same architecture: the same greedy tokens, each a plain run's alone."""
    model = Model.load(files[(arch, 0)])
    prompts = [PROMPT, "in the beginning there was"]
    plain = _serve(model, None, prompts)
    spec = SpecParams(type="draft-simple", draft_model=str(files[(arch, 1)]), n_max=3)
    assert _serve(model, spec, prompts) == plain
    for p, toks in zip(prompts, plain):
        ctx = Context(model, ContextParams(n_ctx=256, n_batch=64, n_ubatch=64))
        ids = model.tokenize(p, add_special=True, parse_special=True)
        assert list(generate(ctx, Sampler(SamplingParams(temp=0.0)), ids, 24)) == toks
