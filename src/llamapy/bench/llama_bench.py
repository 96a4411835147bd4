"""llama-bench: every combination of the comma-list options is one instance; each instance
runs pp (prompt in n_batch chunks), tg (one token per decode) or pp+tg, after one warm-up,
`reps` times on a cleared cache, and reports tokens per second (tools/llama-bench)."""
from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..batch import Batch
from ..context import Context
from ..model.model import Model
from ..params import ContextParams
from . import info

if TYPE_CHECKING:
    from ..pipeline import PipelineParams
    from ..speculative import SpecParams

MiB = 1024 * 1024
FA_VALUES = {"auto": -1, "-1": -1, "off": 0, "0": 0, "on": 1, "1": 1}


@dataclass(slots=True)
class BenchParams:
    """cmd_params: lists are swept as a cartesian product, in llama-bench's loop order."""

    model: str
    n_prompt: list[int] = field(default_factory=lambda: [512])
    n_gen: list[int] = field(default_factory=lambda: [128])
    n_pg: list[tuple[int, int]] = field(default_factory=list)
    n_depth: list[int] = field(default_factory=lambda: [0])
    n_batch: list[int] = field(default_factory=lambda: [2048])
    n_ubatch: list[int] = field(default_factory=lambda: [512])
    type_k: list[str] = field(default_factory=lambda: ["f16"])
    type_v: list[str] = field(default_factory=lambda: ["f16"])
    flash_attn: list[str] = field(default_factory=lambda: ["auto"])
    no_kv_offload: list[bool] = field(default_factory=lambda: [False])
    n_ctx: list[int] = field(default_factory=lambda: [0])  # llamapy extra: 0 = n_prompt + n_gen + n_depth
    n_threads: list[int] = field(default_factory=lambda: [torch.get_num_threads()])
    reps: int = 5
    no_warmup: bool = False
    device: str = "cpu"
    seed: int = 1
    spec: "SpecParams | None" = None  # --spec-type ...: the tg tests generate greedily with drafts
    pipe: "PipelineParams | None" = None  # --pp N: each instance's context is a pipeline of N stages


@dataclass(frozen=True, slots=True)
class Instance:
    """cmd_params_instance: one point of the sweep."""

    n_prompt: int
    n_gen: int
    n_depth: int
    n_batch: int
    n_ubatch: int
    type_k: str
    type_v: str
    flash_attn: str
    n_ctx: int
    n_threads: int
    no_kv_offload: bool = False

    @property
    def test_name(self) -> str:
        """pp512, tg128, pp512+tg128, with " @ d<depth>" when n_depth > 0."""
        if self.n_prompt > 0 and self.n_gen == 0:
            s = f"pp{self.n_prompt}"
        elif self.n_gen > 0 and self.n_prompt == 0:
            s = f"tg{self.n_gen}"
        else:
            s = f"pp{self.n_prompt}+tg{self.n_gen}"
        return s + (f" @ d{self.n_depth}" if self.n_depth > 0 else "")

    def ctx_params(self, device: str) -> ContextParams:
        n_ctx = self.n_ctx or (self.n_prompt + self.n_gen + self.n_depth)
        return ContextParams(n_ctx=n_ctx, n_batch=self.n_batch, n_ubatch=self.n_ubatch, type_k=self.type_k,
                             type_v=self.type_v, flash_attn=self.flash_attn, n_threads=self.n_threads, device=device,
                             offload_kqv=not self.no_kv_offload)


def get_instances(p: BenchParams) -> list[Instance]:
    """get_cmd_params_instances: for each option combination, the pp tests, then tg, then pg."""
    out: list[Instance] = []
    for nb, nub, tk, tv, nkvo, fa, nc, nt, nd in itertools.product(p.n_batch, p.n_ubatch, p.type_k, p.type_v,
                                                                   p.no_kv_offload, p.flash_attn, p.n_ctx, p.n_threads,
                                                                   p.n_depth):
        tests = [(n, 0) for n in p.n_prompt if n > 0] + [(0, n) for n in p.n_gen if n > 0]
        tests += [pg for pg in p.n_pg if pg != (0, 0)]
        for npp, ntg in tests:
            out.append(Instance(npp, ntg, nd, nb, nub, tk, tv, fa, nc, nt, nkvo))
    return out


@dataclass(slots=True)
class TestResult:
    """One printed row (llama-bench's `test`): the instance, the model facts, the samples."""

    inst: Instance
    model_filename: str
    model_type: str
    model_size: int
    model_n_params: int
    backend: str
    cpu_info: str
    gpu_info: str
    test_time: str
    compute_bytes: int = 0
    n_ctx: int = 0
    cpu_isa: str = ""  # info.cpu_isa(): the level llamapy's CPU kernels run at, or "torch"
    spec_type: str = "none"  # speculative decoding in the tg test, and its totals over the repetitions
    n_drafted: int = 0
    n_accepted: int = 0
    n_verify: int = 0
    n_verify_ubatches: int = 0
    samples_ns: list[int] = field(default_factory=list)

    def ubatches_per_verify(self) -> float:
        return self.n_verify_ubatches / self.n_verify if self.n_verify else 0.0

    def samples_ts(self) -> list[float]:
        n_tokens = self.inst.n_prompt + self.inst.n_gen
        return [1e9 * n_tokens / t for t in self.samples_ns]

    def avg_ns(self) -> int:
        return int(_avg(self.samples_ns))

    def stddev_ns(self) -> int:
        return int(_stdev(self.samples_ns))

    def avg_ts(self) -> float:
        return _avg(self.samples_ts())

    def stddev_ts(self) -> float:
        return _stdev(self.samples_ts())


def _avg(v: list[float] | list[int]) -> float:
    return sum(v) / len(v) if v else 0.0


def _stdev(v: list[float] | list[int]) -> float:
    """llama-bench's stdev: sample standard deviation (n - 1), 0 for fewer than 2 samples."""
    n = len(v)
    if n <= 1:
        return 0.0
    mean = _avg(v)
    var = sum(x * x for x in v) / (n - 1) - mean * mean * n / (n - 1)
    return max(var, 0.0) ** 0.5


def test_prompt(ctx: Context, n_prompt: int, n_batch: int, rng: random.Random) -> None:
    """Random tokens (BOS first when the vocab adds BOS) decoded in n_batch-sized calls,
    positions continuing sequence 0 (llama_batch_get_one)."""
    tok = ctx.model.tokenizer
    n_vocab = ctx.model.n_vocab
    n_done = 0
    while n_done < n_prompt:
        n = min(n_prompt - n_done, n_batch)
        ids = [rng.randrange(n_vocab) for _ in range(n)]
        if n_done == 0 and tok.add_bos and tok.bos is not None:
            ids[0] = tok.bos
        ctx.decode(Batch.get_one(ids))
        n_done += n


def test_gen(ctx: Context, n_gen: int, rng: random.Random) -> None:
    """n_gen decode calls of one token each, logits requested, random next token."""
    tok = ctx.model.tokenizer
    n_vocab = ctx.model.n_vocab
    token = tok.bos if tok.add_bos and tok.bos is not None else rng.randrange(n_vocab)
    pos = ctx.memory.seq_pos_max(0) + 1
    batch = Batch()
    for _ in range(n_gen):
        batch.clear()
        batch.add(token, pos, (0,), logits=True)
        ctx.decode(batch)
        pos += 1
        token = rng.randrange(n_vocab)


def test_gen_spec(ctx: Context, n_gen: int, spec, res: "TestResult") -> None:
    """n_gen tokens generated greedily with speculative decoding (drafts verified in one
    decode each; an end-of-generation token counts as any other), after BOS or the depth
    tokens; the draft and verification counts added to res."""
    from ..generate import GenTimings, generate
    from ..sampling import Sampler, SamplingParams

    tok = ctx.model.tokenizer
    start = [tok.bos if tok.add_bos and tok.bos is not None else 0]
    tm = GenTimings()
    spec.reset()
    for _ in generate(ctx, Sampler(SamplingParams(temp=0.0)), start, n_gen - 1, timings=tm, spec=spec,
                      stop_at_eog=False):
        pass
    res.n_drafted += tm.n_drafted
    res.n_accepted += tm.n_accepted
    res.n_verify += tm.n_verify
    res.n_verify_ubatches += tm.n_verify_ubatches


def run_instance(model: Model, inst: Instance, p: BenchParams, rng: random.Random, ctx: Context | None = None) -> TestResult:
    """Create a context for `inst` (or take ctx), warm up once, then time `p.reps` runs on a
    cleared cache."""
    ctx = ctx or Context(model, inst.ctx_params(p.device))
    res = TestResult(
        inst=inst, model_filename=str(model.path), model_type=info.model_desc(model), model_size=info.model_size(model),
        model_n_params=info.model_n_params(model), backend=info.backend_name(p.device), cpu_info=info.cpu_info(),
        gpu_info=info.gpu_info(p.device), test_time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        n_ctx=ctx.n_ctx, cpu_isa=info.cpu_isa(),
    )
    spec = None
    if p.spec is not None and p.spec.type != "none" and inst.n_gen > 0:
        from ..speculative import make_speculator

        spec = make_speculator(p.spec, model, inst.ctx_params(p.device))
        res.spec_type = p.spec.type
    gen = (lambda c, n, r: test_gen_spec(c, n, spec, res)) if spec is not None else test_gen
    ctx.memory.clear()
    if not p.no_warmup:
        if inst.n_prompt > 0:
            test_prompt(ctx, inst.n_prompt, inst.n_batch, rng)
        if inst.n_gen > 0:
            gen(ctx, 2, rng)
        res.n_drafted = res.n_accepted = res.n_verify = res.n_verify_ubatches = 0
    for _ in range(p.reps):
        ctx.memory.clear()
        if inst.n_depth > 0:
            test_prompt(ctx, inst.n_depth, inst.n_batch, rng)
        t0 = time.perf_counter_ns()
        if inst.n_prompt > 0:
            test_prompt(ctx, inst.n_prompt, inst.n_batch, rng)
        if inst.n_gen > 0:
            gen(ctx, inst.n_gen, rng)
        if p.device.startswith("cuda"):
            torch.cuda.synchronize()
        res.samples_ns.append(time.perf_counter_ns() - t0)
    res.compute_bytes = int(ctx.memory_report().get("compute", 0))
    return res


def run_bench(p: BenchParams, on_result=None) -> list[TestResult]:
    """Load the model once, run every instance in order; `on_result(r)` is called as each
    finishes (the printers stream rows the way llama-bench does)."""
    rng = random.Random(p.seed)
    results: list[TestResult] = []
    if p.pipe is not None and p.pipe.enabled:  # a pipeline per instance: its stages hold that instance's caches
        from ..pipeline import open_context

        for inst in get_instances(p):
            model, ctx = open_context(p.model, inst.ctx_params(p.device), p.pipe, device=p.device)
            try:
                r = run_instance(model, inst, p, rng, ctx)
            finally:
                ctx.close()
            results.append(r)
            if on_result is not None:
                on_result(r)
        return results
    model = Model.load(p.model, device=p.device)
    for inst in get_instances(p):
        r = run_instance(model, inst, p, rng)
        results.append(r)
        if on_result is not None:
            on_result(r)
    return results
