"""Pipeline parallelism: a model split by layers across processes (and hosts, under torchrun),
over torch.distributed; see context.py for the flow and stage.py for a stage's side."""
from .comm import StageError
from .open import PipelineParams, open_context, plan_stages
from .split import PipelineConfigError, split_layers

__all__ = ["PipelineConfigError", "PipelineParams", "StageError", "open_context", "plan_stages", "split_layers"]
