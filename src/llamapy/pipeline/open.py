"""open_context(): a Model and its Context, in one process or as stage 0 of a pipeline
(--pp N / torchrun).  The split is checked against the file's header before any weight is
read, so a bad --pp / --tensor-split is a one-line error that costs nothing."""
from __future__ import annotations

from dataclasses import dataclass

from ..params import ContextParams
from .env import under_torchrun


@dataclass(frozen=True, slots=True)
class PipelineParams:
    pp: int = 1  # stages (--pp); under torchrun, its WORLD_SIZE
    tensor_split: tuple[float, ...] | None = None  # --tensor-split proportions, one per stage
    timeout_s: float = 60.0  # --pp-timeout: the longest wait for another stage

    @property
    def enabled(self) -> bool:
        return self.pp > 1 or under_torchrun()


def plan_stages(model_ref, pipe: PipelineParams):
    """(GGUF path, StageLayers per stage) from the header alone; PipelineConfigError if the
    split cannot be made."""
    from ..gguf.header import GGUFHeader
    from ..model.hparams import hparams_from_gguf
    from ..registry import resolve_model
    from .split import split_layers

    path = resolve_model(None if model_ref is None else str(model_ref))
    hp = hparams_from_gguf(GGUFHeader(path))
    return path, split_layers(hp.n_layer, pipe.pp, None if pipe.tensor_split is None else list(pipe.tensor_split))


def open_context(model_ref, params: ContextParams, pipe: PipelineParams | None = None, device: str = "auto",
                 exact: bool = False, mmap: bool | None = None, lora: tuple[tuple[str, float], ...] = ()):
    """(Model, Context): a plain Context, or with --pp N > 1 a PipelineContext whose other
    stages are started here (or joined, under torchrun).  mmap: Model.load's (stage 0's; the
    other stages take the default).  lora: the adapters (path, scale) Model.add_loras applies
    before the context is made (one process only)."""
    from ..context import Context
    from ..model.model import Model

    pipe = pipe or PipelineParams()
    if not pipe.enabled:
        model = Model.load(model_ref, device=device, exact=exact, mmap=mmap)
        if lora:
            model.add_loras(list(lora))
        return model, Context(model, params)
    if lora:
        raise ValueError(f"--lora with --pp {pipe.pp}: LoRA adapters run in one process here (drop --pp)")
    if device not in ("auto", "cpu"):
        raise ValueError(f"--pp {pipe.pp}: pipeline stages run on the CPU over gloo here (got --device {device})")
    from .context import PipelineContext
    from .launch import Pipeline

    path, stages = plan_stages(model_ref, pipe)
    p = Pipeline.start(pipe.pp, pipe.timeout_s)
    try:
        model = Model.load(path, device="cpu", exact=exact, stage=stages[0], mmap=mmap)
        return model, PipelineContext(model, params, p, stages)
    except BaseException:
        p.close(graceful=not p.broken)
        raise
