"""Memory per pipeline stage, before anything runs: each stage's weights (the tensors it holds,
as the loader keeps them), its layers' KV cache, its compute buffer and the activations in
flight through it.  PipelineContext.stage_memory() reports what each stage allocated; a test
holds weights and KV byte-exact to these figures."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..cparams import resolve_cparams
from ..memory.estimate import F32, MemoryEstimate, estimate_from, model_info, resident_weight_bytes
from ..model.stage import StageLayers
from ..params import ContextParams

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class StageEstimate:
    index: int
    stage: StageLayers
    est: MemoryEstimate  # weights, KV and compute of this stage alone (output only on the last)
    activations: int  # float32 [n_ubatch, n_embd] buffers in flight: sent, received, or both

    @property
    def total(self) -> int:
        return self.est.total + self.activations

    def line(self) -> str:
        e, s = self.est, self.stage
        parts = [f"weights {e.weights / MiB:.2f}", f"KV {e.kv / MiB:.2f}", f"compute {e.compute / MiB:.2f}",
                 f"activations in flight {self.activations / MiB:.2f}"]
        if s.last:
            parts.append(f"output {e.output / MiB:.2f}")
        held = " + token_embd" if s.first else ""
        held += " + output" if s.last else ""
        return (f"stage {self.index}: layers {s.il0}-{s.il1 - 1} ({s.n_layer}{held}): "
                f"{self.total / MiB:.2f} MiB = {' + '.join(parts)} MiB")


def estimate_stages(model_ref, params: ContextParams, stages: list[StageLayers], n_outputs: int | None = None,
                    n_ctx_fitted: int | None = None) -> list[StageEstimate]:
    """One StageEstimate per stage, from the file's header (no tensor data read)."""
    info, tensors = _header(model_ref)
    return _stages(info, tensors, params, stages, n_outputs, n_ctx_fitted)


def _header(model_ref):
    """(ModelInfo, tensor infos) of a path / registered name, or of a loaded Model's header."""
    from ..gguf.header import GGUFHeader
    from ..memory.estimate import ModelInfo, dense_for
    from ..registry import resolve_model

    if hasattr(model_ref, "gguf"):  # a loaded (stage 0) Model: its header is read already
        t = model_ref.gguf.tensors
        return ModelInfo(model_ref.hparams, 0, 0, None, dense_for(t)), t
    path = model_ref if hasattr(model_ref, "is_file") else resolve_model(None if model_ref is None else str(model_ref))
    return model_info(path), GGUFHeader(path).tensors


def _stages(info, tensors, params: ContextParams, stages: list[StageLayers], n_outputs: int | None,
            n_ctx_fitted: int | None) -> list[StageEstimate]:
    hp = info.hparams
    c = resolve_cparams(params, hp, n_ctx_fitted)
    out = []
    for i, st in enumerate(stages):
        held = {n: t for n, t in tensors.items() if st.holds(n)}
        e = estimate_from(hp, c, resident_weight_bytes(held), sum(t.n_bytes for t in held.values()), n_outputs,
                          dense=info.dense, layers=st.ids)
        if not st.last:  # the output norm, the logits and their buffer live on the last stage only
            e = replace(e, compute_terms=tuple(t for t in e.compute_terms if t.phase != "output"), output=0)
        rows = min(c.n_ctx, c.n_ubatch) * hp.n_embd * F32
        out.append(StageEstimate(i, st, e, rows * ((not st.first) + (not st.last))))
    return out


def fit_stages(model_ref, params: ContextParams, stages: list[StageLayers], hosts: list[tuple[str, int]],
               n_outputs: int | None = None) -> int:
    """The fitter (-c 0) for a pipeline: the largest n_ctx, from n_ctx_train down in steps of
    256 to the 4096 floor, at which the stages on each host (hosts[i]: stage i's host name and
    that host's memory budget) fit its budget together -- the tightest host decides.  An
    explicit -c is checked the same way.  Raises MemoryBudgetError with the numbers."""
    from ..memory.fit import N_CTX_MIN_FIT, N_CTX_STEP, MemoryBudgetError, _quiet, largest_step

    info, tensors = _header(model_ref)
    budget = {h: b for h, b in hosts}

    def worst(n_ctx: int) -> tuple[int, str, int]:  # (bytes over budget at the tightest host, host, its need)
        with _quiet():
            ests = _stages(info, tensors, params, stages, n_outputs, n_ctx)
        need: dict[str, int] = {}
        for (h, _), s in zip(hosts, ests):
            need[h] = need.get(h, 0) + s.total
        h = max(need, key=lambda k: need[k] - budget[k])
        return need[h] - budget[h], h, need[h]

    def fail(n_ctx: int, what: str) -> MemoryBudgetError:
        _, h, need = worst(n_ctx)
        return MemoryBudgetError(f"{what} needs {need / MiB:.2f} MiB on host {h} (its pipeline stages together) but its "
                                 f"memory budget is {budget[h] / MiB:.2f} MiB; lower -c/--ctx-size, quantize the cache "
                                 f"(-ctk q8_0 -ctv q8_0), add stages on other hosts, or raise --mem-budget")

    if params.n_ctx > 0:
        if worst(params.n_ctx)[0] > 0:
            raise fail(params.n_ctx, f"-c {params.n_ctx}")
        return params.n_ctx
    n_train = info.hparams.n_ctx_train
    floor = min(N_CTX_MIN_FIT, n_train)
    n = largest_step(floor, n_train, lambda n: worst(n)[0] <= 0)
    if n == 0:
        first = -(-floor // N_CTX_STEP) * N_CTX_STEP
        raise fail(first, f"even the fitter's floor of {floor}")
    return n
