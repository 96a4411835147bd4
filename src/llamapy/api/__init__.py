"""llamapy's high-level Python API: `Llama`, llama-cpp-python's class and return shapes
over llamapy's engine and its server's request code (docs/python-api.md)."""
from __future__ import annotations

from .llama import Llama
from .state import LlamaState

__all__ = ["Llama", "LlamaState"]
