"""Architecture registry: one file per architecture, its class naming its GGUF
`general.architecture` in `arch_name`.  The registry imports the architectures; they import
nothing of it."""
from __future__ import annotations


def arch_class(name: str) -> type:
    """The class for GGUF `general.architecture` == name; GGUFError (a ValueError) if unsupported."""
    from ...gguf.header import GGUFError
    from .bert import BertModel
    from .gptoss import GptOssModel
    from .llama import LlamaModel
    from .nomic_bert import NomicBertModel
    from .phi3 import Phi3Model
    from .qwen2 import Qwen2Model
    from .qwen3 import Qwen3Model
    from .qwen3moe import Qwen3MoeModel

    known = {c.arch_name: c for c in (BertModel, GptOssModel, LlamaModel, NomicBertModel, Phi3Model, Qwen2Model,
                                      Qwen3Model, Qwen3MoeModel)}
    try:
        from .gemma2 import Gemma2Model
        from .gemma3 import Gemma3Model

        known[Gemma3Model.arch_name] = Gemma3Model
        known[Gemma2Model.arch_name] = Gemma2Model
    except ImportError:
        pass
    if name not in known:
        raise GGUFError(f"unsupported model architecture '{name}' (supported: {', '.join(sorted(known))})")
    return known[name]
