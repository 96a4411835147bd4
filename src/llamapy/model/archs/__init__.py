"""Architecture registry: one file per architecture, registered by its GGUF name."""
from __future__ import annotations

from typing import Callable


def register(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        cls.arch_name = name
        return cls

    return deco


def arch_class(name: str) -> type:
    """The class for GGUF `general.architecture` == name; GGUFError (a ValueError) if unsupported."""
    from ...gguf.header import GGUFError
    from .llama import LlamaModel
    from .qwen2 import Qwen2Model
    from .qwen3 import Qwen3Model

    known = {c.arch_name: c for c in (LlamaModel, Qwen2Model, Qwen3Model)}
    try:
        from .gemma3 import Gemma3Model

        known[Gemma3Model.arch_name] = Gemma3Model
    except ImportError:
        pass
    if name not in known:
        raise GGUFError(f"unsupported model architecture '{name}' (supported: {', '.join(sorted(known))})")
    return known[name]
