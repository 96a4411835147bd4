"""llamapy.Llama: llama-cpp-python's high-level class over llamapy's engine and the server's
request code (api/engine.py), with its names, defaults and OpenAI-shaped return values."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from ..log import logger
from ..sampling import LLAMA_DEFAULT_SEED
from .chat import CHAT_FIELDS, chat_chunks, chat_completion, prepare
from .completion import GenOptions, completion, completion_chunks, stop_list
from .embedding import embed_texts, embedding_response, make_embedder, pooling_arg, pooling_type_int
from .engine import Engine
from .params import context_params, ignored_params
from .state import LlamaState, load_state, save_state

log = logger("api")


class Llama:
    """A model with one context of n_ctx cells.  Calls run one at a time (not thread-safe,
    as llama-cpp-python's); consecutive calls reuse the longest common prefix of the cached
    tokens.  Parameters of llama-cpp-python's Llama that llamapy does not use are accepted
    and named once in the log (ignored_params)."""

    def __init__(self, model_path: str, *, n_ctx: int = 512, n_batch: int = 512, n_ubatch: int = 512,
                 n_threads: int | None = None, n_gpu_layers: int = 0, seed: int = LLAMA_DEFAULT_SEED,
                 embedding: bool = False, pooling_type: Any = -1, flash_attn: bool = False, type_k: Any = None,
                 type_v: Any = None, chat_format: str | None = None, draft_model: Any = None, verbose: bool = True,
                 **rest: Any) -> None:
        self.ignored = ignored_params(rest)
        if chat_format is not None:
            self.ignored.append("chat_format")  # the model's own template renders every chat
        spec = None
        if draft_model is not None:
            if not isinstance(draft_model, (str, Path)):
                raise ValueError("draft_model: give a GGUF path or a registered name (llama-cpp-python's "
                                 "LlamaDraftModel objects are not supported)")
            from ..speculative.proposer import SpecParams

            spec = SpecParams(type="draft-simple", draft_model=str(draft_model))
        if self.ignored:
            log.warning(f"Llama: these parameters are accepted and ignored by llamapy: {', '.join(self.ignored)}")
        self.model_path = str(model_path)
        self.seed, self.verbose, self.chat_format = seed, verbose, chat_format
        params = context_params(n_ctx, n_batch, n_ubatch, n_threads, n_gpu_layers, flash_attn, type_k, type_v, rest)
        self._eng = Engine.open(self.model_path, params, spec, mmap=rest.get("use_mmap"))
        self.model = self._eng.model
        self.ctx = self._eng.ctx
        self._embedder = make_embedder(self.ctx, pooling_arg(pooling_type)) if embedding else None

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str | None = None, **kwargs: Any) -> "Llama":
        """A model from llamapy's registry by name ("smollm2-135m"), pulled when not yet here
        (llama-cpp-python's reads the Hugging Face Hub; filename is ignored here)."""
        from ..registry import resolve_model

        return cls(str(resolve_model(repo_id)), **kwargs)

    # --- tokens -------------------------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return self.model.tokenize(text.decode("utf-8", errors="replace"), add_special=add_bos, parse_special=special)

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None, special: bool = False) -> bytes:
        return b"".join(self.model.tokenizer.token_to_piece(t, special=special) for t in tokens)

    def n_ctx(self) -> int:
        return self.ctx.n_ctx

    def n_embd(self) -> int:
        return self.model.hparams.n_embd

    def n_vocab(self) -> int:
        return self.model.n_vocab

    def token_bos(self) -> int:
        return -1 if self.model.tokenizer.bos is None else self.model.tokenizer.bos

    def token_eos(self) -> int:
        return -1 if self.model.tokenizer.eos is None else self.model.tokenizer.eos

    @property
    def input_ids(self) -> list[int]:
        """The tokens whose K/V the context holds."""
        return list(self._eng.slot.cache_tokens)

    @property
    def n_tokens(self) -> int:
        return len(self._eng.slot.cache_tokens)

    def reset(self) -> None:
        self._eng.reset()

    def save_state(self) -> LlamaState:
        return save_state(self._eng, self.seed)

    def load_state(self, state: LlamaState) -> None:
        load_state(self._eng, state)

    # --- embeddings -----------------------------------------------------------------------------
    def pooling_type(self) -> int:
        """llama_pooling_type of the embeddings (0 none ... 4 rank); -1 without embedding=True."""
        return -1 if self._embedder is None else pooling_type_int(self._embedder)

    def embed(self, input: str | list[str], normalize: bool = False, truncate: bool = True,
              return_count: bool = False) -> Any:
        """llama-cpp-python's embed: one embedding (a str input) or a list; per-token lists with
        pooling none; (output, total tokens) with return_count.  The cached tokens are reset."""
        if self._embedder is None:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        texts = [input] if isinstance(input, str) else list(input)
        data, n_tokens = embed_texts(self._embedder, texts, normalize, truncate)
        self._eng.slot.cache_tokens = []  # embed_texts cleared the cells
        out = data[0] if isinstance(input, str) else data
        return (out, n_tokens) if return_count else out

    def create_embedding(self, input: str | list[str], model: str | None = None) -> dict[str, Any]:
        """llama-cpp-python's CreateEmbeddingResponse: {object: list, data: [{object, embedding,
        index}], model, usage} (vectors unnormalised, as llama-cpp-python's)."""
        data, n_tokens = self.embed(input if isinstance(input, list) else [input], return_count=True)
        return embedding_response(data, n_tokens, model if model is not None else self.model_path)

    # --- generation -----------------------------------------------------------------------------
    def _opts(self, max_tokens: int | None, temperature: float, top_p: float, top_k: int, min_p: float,
              repeat_penalty: float, frequency_penalty: float, presence_penalty: float, stop: Any,
              logprobs: int | None, seed: int | None) -> GenOptions:
        return GenOptions(max_tokens, temperature, top_p, top_k, min_p, repeat_penalty, frequency_penalty, presence_penalty,
                          stop_list(stop), logprobs or 0, self.seed if seed is None else seed)

    def create_completion(self, prompt: str | list[int], suffix: str | None = None, max_tokens: int | None = 16,
                          temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                          logprobs: int | None = None, echo: bool = False, stop: str | list[str] | None = None,
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: int | None = None, grammar: Any = None,
                          **rest: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """llama-cpp-python's text_completion dict, or with stream=True an iterator of its
        chunks.  grammar: GBNF text or an object with a `_grammar` string (LlamaGrammar)."""
        if suffix is not None:
            raise ValueError("suffix (infill) is not supported by llamapy.Llama")
        opts = self._opts(max_tokens, temperature, top_p, top_k, min_p, repeat_penalty, frequency_penalty,
                          presence_penalty, stop, logprobs, seed)
        constraint = self._eng.constraint(_grammar_spec(grammar))
        if stream:
            return completion_chunks(self._eng, self.model_path, prompt, opts, echo, constraint)
        return completion(self._eng, self.model_path, prompt, opts, echo, constraint)

    __call__ = create_completion

    def create_chat_completion(self, messages: list[dict[str, Any]], functions: Any = None, function_call: Any = None,
                               tools: list[dict[str, Any]] | None = None, tool_choice: Any = None,
                               temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05,
                               typical_p: float = 1.0, stream: bool = False, stop: str | list[str] | None = None,
                               seed: int | None = None, response_format: dict[str, Any] | None = None,
                               max_tokens: int | None = None, presence_penalty: float = 0.0,
                               frequency_penalty: float = 0.0, repeat_penalty: float = 1.0, logprobs: bool | None = None,
                               top_logprobs: int | None = None, grammar: Any = None,
                               **rest: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """llama-cpp-python's chat.completion dict (or chat.completion.chunk iterator).
        tool_choice "required" or {"type": "function", ...} forces a call; response_format
        {"type": "json_object", "schema": {...}} constrains the answer to the schema."""
        gspec = _grammar_text(grammar)
        extra = {k: rest.pop(k) for k in CHAT_FIELDS if k in rest}  # the server's chat request fields
        ids, constraint, prep = prepare(self._eng, messages, tools, tool_choice, response_format, gspec, **extra)
        opts = self._opts(max_tokens, temperature, top_p, top_k, min_p, repeat_penalty, frequency_penalty,
                          presence_penalty, stop, 0, seed)
        if stream:
            return chat_chunks(self._eng, self.model_path, ids, constraint, prep, opts)
        return chat_completion(self._eng, self.model_path, ids, constraint, prep, opts)


def _grammar_text(grammar: Any) -> str | None:
    if grammar is None or isinstance(grammar, str):
        return grammar
    return getattr(grammar, "_grammar", None) or str(grammar)


def _grammar_spec(grammar: Any):
    text = _grammar_text(grammar)
    if text is None:
        return None
    from ..grammar import GrammarSpec

    return GrammarSpec("gbnf", text)
