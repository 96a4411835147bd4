"""`llamapy serve`'s settings, typed: what a server (one process, or each replica on Ray
Serve) is built from.  The command line parses its flags once into a ServeSettings
(cli/serve.py serve_settings); the server and the replicas read this, never argv.  Frozen
and picklable: Ray ships it to each replica's process."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ..params import ContextParams
from ..pipeline.open import PipelineParams
from ..speculative.proposer import SpecParams
from ..chat.apply import ChatOptions
from .cors import CorsSettings
from .request_defaults import RequestDefaults

MiB = 1024 * 1024
AUTO_SLOTS = 4  # llama-server: -np unset -> 4 slots sharing one unified cache


def resolve_parallel(n_parallel: int | None, kv_unified: bool) -> tuple[int, bool]:
    """llama-server's auto mode: no -np gives 4 slots over a unified cache; an explicit -np
    splits -c between the slots unless --kv-unified."""
    if n_parallel is None:
        return AUTO_SLOTS, True
    if n_parallel < 1:
        raise ValueError(f"-np ({n_parallel}) must be >= 1 (leave it unset for auto: {AUTO_SLOTS} slots, unified cache)")
    return n_parallel, kv_unified


@dataclass(frozen=True, slots=True)
class ReplicaSettings:
    """--replicas / --min-replicas / --max-replicas / --ray-address / --routing."""

    replicas: int | None = None  # fixed number of replicas
    min_replicas: int | None = None  # autoscaling when set (with max_replicas)
    max_replicas: int | None = None
    ray_address: str | None = None  # None: $RAY_ADDRESS, else a local Ray
    routing: str = "affinity"  # or "round-robin"

    @property
    def wanted(self) -> bool:
        """Did the command line ask for replicas on Ray Serve at all?"""
        return self.replicas is not None or self.min_replicas is not None or self.max_replicas is not None


EMBD_SEQ_MAX = 64  # --embedding: the sequences one batch may hold (-np raises it)


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """Every `llamapy serve` flag, typed.  ctx holds -c, -b, -ub, -ctk/-ctv, -fa, -kvu, -t,
    --mem-budget, -nkvo and the device already resolved from --device / -ngl; its n_seq_max is
    -np (AUTO_SLOTS when unset) and kv_unified is -kvu as typed.  n_parallel is -np itself
    (None: auto) and context_params() applies llama-server's auto mode to ctx.  Sizes are as
    typed (max_body_mib in MiB, times in seconds)."""

    ctx: ContextParams
    model: str | None = None  # -m: a registered name or a GGUF path (None: the default model)
    n_parallel: int | None = None  # -np; None: auto (AUTO_SLOTS slots over a unified cache)
    pipe: PipelineParams = field(default_factory=PipelineParams)
    spec: SpecParams = field(default_factory=SpecParams)
    mmap: bool | None = None  # --mmap / --no-mmap; None: Model.load's default
    host: str = "127.0.0.1"
    port: int = 8080  # 0: any free port
    api_key: str | None = None
    api_keys: tuple[str, ...] = ()  # every accepted key: --api-key a,b and --api-key-file's lines (cli/serve.py)
    metrics: bool = False
    alias: str | None = None  # /v1/models' name (None: the model file's stem); comma-separated: aliases
    tags: str | None = None  # --tags, comma-separated (informational)
    slots: bool = True  # the /slots endpoint
    webui: bool = True  # the pages at / and /engine (--no-webui: off)
    engine_events: bool = False  # /engine/events (--engine-events; --metrics turns it on too)
    max_queue: int | None = None  # None: 4 x the slots
    timeout: float = 600.0
    max_body_mib: float = 16.0
    shutdown_timeout: float = 10.0
    slot_prompt_similarity: float = 0.5
    verbose: bool = False
    defaults: RequestDefaults = field(default_factory=RequestDefaults)  # --temp, --top-k, --top-p, --min-p, --seed, -n
    replicas: ReplicaSettings = field(default_factory=ReplicaSettings)
    embedding: bool = False  # --embedding: embeddings only, many sequences per batch
    pooling: str | None = None  # --pooling (None: the model's)
    embd_normalize: int = 2
    chat: ChatOptions = field(default_factory=ChatOptions)  # --jinja, --chat-template*, --reasoning-*
    slot_save_path: str | None = None  # --slot-save-path: the folder of POST /slots/{id}?action=save|restore
    ctx_shift: bool = False  # --context-shift / --no-context-shift (llama-server's default: off)
    n_keep: int = 0  # --keep: tokens a context shift keeps (-1: the whole prompt)
    n_cache_reuse: int = 0  # --cache-reuse: the smallest moved prompt-cache chunk shifted into place (0: off)
    cache_ram_mib: int = 8192  # --cache-ram: the host-memory prompt cache's limit in MiB (-1: no limit, 0: off; llama-server's default)
    cache_ram_given: bool = False  # --cache-ram was on the command line (a limit over --mem-budget is then refused, not lowered)
    cache_idle_slots: bool = True  # --cache-idle-slots / --no-cache-idle-slots (needs --cache-ram)
    props: bool = False  # --props: POST /props allowed
    lora: tuple[tuple[str, float], ...] = ()  # --lora / --lora-scaled: (path, initial scale), ids in this order
    cors: CorsSettings = field(default_factory=CorsSettings)  # --cors-origins, --cors-methods, --cors-headers, --cors-credentials
    ui_mcp_proxy: bool = False  # --ui-mcp-proxy: /cors-proxy forwards (server/http_proxy.py)
    server_tools: tuple[str, ...] = ()  # --tools: the enabled built-in tools (also: the CORS default turns localhost)

    def check(self) -> None:
        """ValueError, naming the flag, for a setting no server can start with."""
        resolve_parallel(self.n_parallel, self.ctx.kv_unified)
        for name, v in (("--max-queue", self.max_queue), ("--timeout", self.timeout), ("--max-body", self.max_body_mib),
                        ("--shutdown-timeout", self.shutdown_timeout)):
            if v is not None and v < 0:
                raise ValueError(f"{name} ({v:g}) must be >= 0")
        if self.n_cache_reuse < 0:
            raise ValueError(f"--cache-reuse ({self.n_cache_reuse}) must be >= 0 (0: off)")
        if self.cache_ram_mib < -1:
            raise ValueError(f"--cache-ram ({self.cache_ram_mib}) must be >= -1 (MiB; -1: no limit, 0: off)")
        if self.n_keep < -1:
            raise ValueError(f"--keep ({self.n_keep}) must be >= -1 (-1: the whole prompt)")
        if self.slot_save_path is not None and not Path(self.slot_save_path).is_dir():
            raise ValueError(f"--slot-save-path: not a directory: {self.slot_save_path}")

    def context_params(self) -> ContextParams:
        """The server's ContextParams: ctx with -np resolved (auto: 4 slots, unified cache); a copy."""
        n_par, unified = resolve_parallel(self.n_parallel, self.ctx.kv_unified)
        if self.embedding:  # sequences, not slots: as many per batch as llama-embedding packs (unified cache)
            return replace(self.ctx, n_seq_max=max(n_par, EMBD_SEQ_MAX), kv_unified=True)
        return replace(self.ctx, n_seq_max=n_par, kv_unified=unified)

    @property
    def max_body(self) -> int:
        """--max-body in bytes."""
        return int(self.max_body_mib * MiB)
