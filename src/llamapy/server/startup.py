"""Bringing up a server in this process from its ServeSettings: the process's tuning, the
routes' ServerState, then the model, the context and the scheduler attached to that state.
`llamapy serve` (cli/serve.py) and each replica of --replicas (replicas/deployments.py) both
start this way; neither reads argv here."""
from __future__ import annotations

import os
from pathlib import Path

from ..log import logger
from .bridge import ServerState
from .settings import MiB, ServeSettings


def tune_server_process() -> None:
    """A long-running server process's settings (llamapy serve, and each replica of
    --replicas): glibc's heap (memory/heap.py tune_heap, with 2 arenas: each thread that
    allocates would get its own, up to 8 per core, which keeps what it freed, so the HTTP worker
    threads slowly grow the resident set; what the heap holds when the server goes idle is
    handed back by the scheduler's release_heap, malloc_trim) and oneDNN's primitive cache.
    oneDNN keeps a primitive (and its buffers) per GEMM shape it met, up to 1024 of them; a
    server's prefills meet a new row count at nearly every step, and a soak of 2,000 requests
    grew the resident set by ~40 MiB through it (found with memray).  16 bound it."""
    from ..memory.heap import tune_heap

    tune_heap(arenas=2)
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")


def log_chat_template(t) -> None:
    """As llama-server at start-up: the chat template, then the chat format its outputs are
    parsed with."""
    from ..chat.tool_syntax import chat_format

    log = logger("srv")
    log.info(f"init: chat template, example_format: {t.source[:2000]!r}" if t.is_default else f"init: chat template:\n{t.source}")
    log.info(f"init: chat format: {chat_format(t).name}, caps: {t.caps.to_json()}")


def server_state(s: ServeSettings) -> ServerState:
    """The routes' state before the model loads (/health answers 503 until load_model)."""
    return ServerState(api_key=s.api_key, api_keys=s.api_keys, metrics=s.metrics, slots=s.slots, max_body=s.max_body, timeout=s.timeout,
                       defaults=s.defaults, webui=s.webui, engine_events=s.engine_events, chat=s.chat,
                       slot_save_path=None if s.slot_save_path is None else Path(s.slot_save_path), props=s.props,
                       cors=s.cors, verbose=s.verbose, ui_mcp_proxy=s.ui_mcp_proxy, server_tools=s.server_tools)


def split_names(value: str | None) -> tuple[str, ...]:
    """--alias / --tags: comma-separated names, stripped, empty ones dropped, sorted and unique
    (llama-server keeps them in a std::set)."""
    return tuple(sorted({v.strip() for v in (value or "").split(",") if v.strip()}))


def load_model(s: ServeSettings, state: ServerState) -> None:
    """Model, context, scheduler; then publish them to the routes (the server turns ready)."""
    from ..pipeline import open_context
    from .scheduler import Scheduler

    log = logger("srv")
    params = s.context_params()
    model, ctx = open_context(s.model, params, s.pipe, device=s.ctx.device, mmap=s.mmap, lora=s.lora)
    rep = ctx.memory_report()
    log.info(f"load_model: memory: model {rep['model'] / MiB:.2f} MiB, KV cache {(rep['kv_k'] + rep['kv_v']) / MiB:.2f} MiB "
             f"(K {rep['kv_k'] / MiB:.2f} + V {rep['kv_v'] / MiB:.2f}), output {rep['output'] / MiB:.2f} MiB")
    c = ctx.cparams
    if c.kv_unified:
        log.info(f"load_model: {c.n_seq_max} slots share one unified cache of {c.n_ctx} cells; each request may use up to {c.n_ctx_seq}")
    else:
        log.info(f"load_model: {c.n_seq_max} slots, each holds {c.n_ctx_seq} cells (-c {c.n_ctx} / -np {c.n_seq_max})")
    for i in range(c.n_seq_max):
        logger("slot").info(f"load_model: id {i:2d} | task -1 | new slot, n_ctx = {c.n_ctx_seq}")
    spec = s.spec
    proposers = None
    if spec.type != "none":
        from ..speculative.proposer import make_proposers

        proposers = make_proposers(spec, model, params, c.n_seq_max)
        log.info(f"load_model: speculative decoding: {spec.type}, up to {spec.draft_len} draft tokens per slot and step")
    max_queue = s.max_queue if s.max_queue is not None else 4 * c.n_seq_max
    sched = Scheduler(ctx, spec, proposers, max_queue=max_queue, slot_prompt_similarity=s.slot_prompt_similarity,
                      ctx_shift=s.ctx_shift, n_keep=s.n_keep, n_cache_reuse=s.n_cache_reuse)
    if not s.embedding:
        from .ram_cache import make_ram_cache, resolve_cache_ram

        cache_ram_mib = resolve_cache_ram(ctx, s.cache_ram_mib, s.cache_ram_given, s.ctx.mem_budget_mib)
        sched.ram = make_ram_cache(ctx.memory, cache_ram_mib, c.n_ctx, s.cache_idle_slots, c.kv_unified, s.verbose, sched.metrics)
    if s.embedding:
        from ..embed import Embedder

        sched.embedder = Embedder(ctx, s.pooling, -1)  # each request normalises its own (embd_normalize)
        state.embedding, state.pooling, state.embd_normalize = True, sched.embedder.pooling, s.embd_normalize
        log.info(f"load_model: embeddings: pooling {sched.embedder.pooling}, up to {c.n_seq_max} sequences and "
                 f"{sched.embedder.max_tokens} tokens per batch")
    sched.start()
    log.info(f"load_model: up to {max_queue} requests wait for a slot (--max-queue); --timeout {s.timeout:g} s")
    model.tokenizer.use_chat_template(s.chat.template)
    log_chat_template(model.tokenizer.chat)
    if not s.chat.use_jinja:  # --no-jinja: llama.cpp's built-in template, or llama-server does not start
        from ..chat.builtin import detect

        name = detect(model.tokenizer.chat.source)
        if name is None:
            raise ValueError("--no-jinja: the chat template is not one of llama.cpp's built-in templates (this custom "
                             "template is not supported, try using --jinja); or give one: --no-jinja --chat-template chatml")
        logger("srv").info(f"init: --no-jinja: built-in chat template {name}")
    aliases = split_names(s.alias)  # llama-server: a std::set, so the first in sorted order names the model
    state.alias, state.aliases, state.tags = (aliases[0] if aliases else model.path.stem), aliases, split_names(s.tags)
    state.attach(model, ctx, sched)
