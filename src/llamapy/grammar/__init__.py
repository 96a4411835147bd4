"""Constrained decoding with llguidance: GBNF, JSON Schema, Lark and regex grammars compiled
against the model's vocabulary (compiler.py), and one constraint per sequence that masks the
logits before the sampler chain (constraint.py)."""
from .compiler import GrammarCompiler, GrammarError, GrammarSpec
from .constraint import Constraint, GrammarDeadEnd

__all__ = ["Constraint", "GrammarCompiler", "GrammarDeadEnd", "GrammarError", "GrammarSpec"]
