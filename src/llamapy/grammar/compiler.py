"""Grammar compilation: a GBNF grammar, a JSON Schema, a Lark grammar or a regex, compiled by
llguidance against the model's vocabulary, cached by its text.

The cache holds one matcher per (kind, text) in its initial state; each constrained sequence
gets a deep copy (cheap: the compiled grammar and lexer are shared).  Compiling never raises
for a good grammar and raises GrammarError with llguidance's message for a bad one, so the
server can answer 400 before a request reaches a slot."""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import llguidance

from .vocab import ll_tokenizer

if TYPE_CHECKING:
    from ..tokenizer import Tokenizer
    from .constraint import Constraint

GrammarKind = Literal["gbnf", "json_schema", "lark", "regex"]

# llguidance's JSON compiler options.  Not lenient: a keyword it cannot enforce is an error
# that names it, never a constraint silently dropped.  Whitespace between tokens is
# llama.cpp's json_schema_to_grammar `space` rule (nothing, a space, or one or two newlines
# and up to 20 spaces/tabs), so a small model cannot wander into endless blank lines.
JSON_OPTIONS: dict[str, Any] = {"lenient": False, "whitespace_pattern": r"(?: |\n{1,2}[ \t]{0,20})?"}


class GrammarError(ValueError):
    """A grammar or schema that does not compile; the message is llguidance's."""


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """What a request asks for: the grammar's kind and its text (a JSON Schema as JSON text)."""

    kind: GrammarKind
    text: str

    @classmethod
    def json_schema(cls, schema: Any) -> "GrammarSpec":
        """A JSON Schema given as a dict (or bool) or as text, keyed by its compact JSON text."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise GrammarError(f"json_schema is not valid JSON: {e}") from None
        if not isinstance(schema, (dict, bool)):
            raise GrammarError(f"json_schema must be a JSON object, got {type(schema).__name__}")
        return cls("json_schema", json.dumps(schema, separators=(",", ":")))  # property order kept: it is the output order


def closed_objects(schema: Any, keep_open: bool = False) -> Any:
    """A copy of schema where an object schema with "properties" and no "additionalProperties"
    gets "additionalProperties": false -- llama.cpp's json_schema_to_grammar default (fewer
    hallucinated keys, smaller grammars).  Every output still validates against the original.
    allOf members stay open (closing each would make their intersection empty)."""
    if isinstance(schema, list):
        return [closed_objects(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in _DATA_KEYS:
            out[k] = v
        elif k in _SCHEMA_MAPS and isinstance(v, dict):
            out[k] = {name: closed_objects(x) for name, x in v.items()}
        elif k == "allOf" and isinstance(v, list):
            out[k] = [closed_objects(x, keep_open=True) for x in v]
        else:
            out[k] = closed_objects(v)
    if "properties" in out and "additionalProperties" not in out and not keep_open:
        out["additionalProperties"] = False
    return out


_DATA_KEYS = ("const", "enum", "default", "examples")  # values, not schemas
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")  # name -> schema


def to_llguidance(spec: GrammarSpec) -> str:
    """The llguidance grammar text for spec; GrammarError for text that cannot be converted."""
    try:
        if spec.kind == "json_schema":
            schema = closed_objects(json.loads(spec.text))
            return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
        return llguidance.grammar_from(spec.kind, spec.text)  # gbnf | lark | regex: llguidance's names
    except ValueError as e:
        raise GrammarError(f"{spec.kind}: {e}") from None


class GrammarCompiler:
    """Compiles and caches grammars for one model.  Thread-safe: the server compiles in its
    HTTP worker threads while the scheduler thread uses matchers."""

    def __init__(self, tokenizer: "Tokenizer", n_vocab: int, cache_size: int = 64) -> None:
        self.tokenizer, self.n_vocab, self.cache_size = tokenizer, n_vocab, cache_size
        self._ll: llguidance.LLTokenizer | None = None
        self._cache: OrderedDict[GrammarSpec, llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()
        self.n_compiled = 0  # cache misses, for tests and the benchmark
        # masks for the next step are computed here while the forward pass runs
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llamapy-grammar")

    @property
    def ll_tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._ll is None:
                self._ll = ll_tokenizer(self.tokenizer, self.n_vocab)
            return self._ll

    def compile(self, spec: GrammarSpec) -> llguidance.LLMatcher:
        """The initial-state matcher for spec (cached by its kind and text)."""
        with self._lock:
            m = self._cache.get(spec)
            if m is not None:
                self._cache.move_to_end(spec)
                return m
        ll = self.ll_tokenizer
        m = llguidance.LLMatcher(ll, to_llguidance(spec), log_level=0)
        if m.is_error():
            raise GrammarError(f"{spec.kind}: {m.get_error()}")
        with self._lock:
            self.n_compiled += 1
            self._cache[spec] = m
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return m

    def constraint(self, spec: GrammarSpec) -> "Constraint":
        """A fresh per-sequence constraint for spec; its first mask starts computing now."""
        from .constraint import Constraint

        return Constraint(self.compile(spec).deep_copy(), self.n_vocab, self.pool)
