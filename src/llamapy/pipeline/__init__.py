"""Pipeline parallelism: a model split by layers across processes (and hosts, under torchrun),
over torch.distributed; see context.py for the flow and stage.py for a stage's side.  The
names below load on first use, so that `llamapy mem` / `--help` stay free of torch."""
from __future__ import annotations

_NAMES = {"StageError": "comm", "PipelineParams": "open", "open_context": "open", "plan_stages": "open",
          "PipelineConfigError": "split", "split_layers": "split"}


def __getattr__(name: str):
    if name in _NAMES:
        import importlib

        return getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_NAMES)
