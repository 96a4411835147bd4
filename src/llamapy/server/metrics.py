"""Server counters (written by the scheduler thread only) and their Prometheus text form,
with llama-server's metric names plus the KV cell counts it dropped."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class ServerMetrics:
    n_prompt_tokens_processed_total: int = 0  # prompt tokens decoded (cached ones excluded)
    n_prompt_tokens_cached_total: int = 0  # prompt tokens a request found in its slot's cache (its cache_n)
    t_prompt_processing_total: float = 0.0  # seconds of decode calls that carried prompt tokens
    n_tokens_predicted_total: int = 0
    n_gen_steps_total: int = 0  # llama-server's predict.steps: finished requests' tokens less their first (free) one
    t_tokens_generation_total: float = 0.0  # seconds of decode calls that carried generated tokens
    n_decode_total: int = 0
    n_tokens_max: int = 0  # the longest sequence a slot held after a decode (prompt + generation)
    n_busy_slots_total: int = 0  # summed over decode calls: slots that had rows in the batch
    n_requests_total: int = 0
    n_requests_finished: int = 0
    n_requests_cancelled: int = 0
    n_requests_processing: int = 0
    n_requests_deferred: int = 0
    kv_cells_used: int = 0
    kv_cells_total: int = 0
    kv_cells_cached: int = 0  # held by idle slots' prompt caches (reusable, freed on demand)
    n_draft_tokens: int = 0  # speculative decoding: draft tokens verified
    n_draft_accepted: int = 0  # ... accepted by the target
    n_draft_verif_steps: int = 0  # ... verifications (one per slot per step with a draft)
    prompt_cache_bytes: int = 0  # --cache-ram: the host-memory prompt cache's entries (server/ram_cache.py)
    prompt_cache_prompts: int = 0
    prompt_cache_tokens: int = 0
    prompt_cache_limit_bytes: int = 0  # --cache-ram N in bytes (0: off or no limit)
    t_start: float = field(default_factory=time.perf_counter)

    def on_decode(self, n_busy: int, n_prompt: int, n_gen: int, dt: float) -> None:
        """One decode call with n_prompt prompt rows and n_gen generation rows took dt s;
        the time is split between the two in proportion to their rows."""
        self.n_decode_total += 1
        self.n_busy_slots_total += n_busy
        n = max(1, n_prompt + n_gen)
        self.n_prompt_tokens_processed_total += n_prompt
        self.t_prompt_processing_total += dt * n_prompt / n
        self.t_tokens_generation_total += dt * n_gen / n

    def on_tokens(self, n: int) -> None:
        self.n_tokens_predicted_total += n

    def snapshot(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def _rate(n: float, t: float) -> float:
    return n / t if t > 0 else 0.0


def render_prometheus(m: dict[str, float]) -> str:
    """Prometheus exposition text from a ServerMetrics.snapshot()."""
    rows = [
        ("counter", "prompt_tokens_total", "Number of prompt tokens processed.", m["n_prompt_tokens_processed_total"]),
        ("counter", "prompt_seconds_total", "Prompt process time.", m["t_prompt_processing_total"]),
        ("counter", "tokens_predicted_total", "Number of generation tokens processed.", m["n_tokens_predicted_total"]),
        ("counter", "tokens_predicted_seconds_total", "Predict process time.", m["t_tokens_generation_total"]),
        ("counter", "n_decode_total", "Total number of llama_decode() calls.", m["n_decode_total"]),
        ("counter", "n_tokens_max", "Largest observed sequence length (prompt + generation)", m["n_tokens_max"]),
        ("counter", "requests_total", "Requests accepted.", m["n_requests_total"]),
        ("counter", "requests_cancelled_total", "Requests cancelled (client gone or shutdown).", m["n_requests_cancelled"]),
        ("gauge", "n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call.",
         m["n_busy_slots_total"] / m["n_decode_total"] if m["n_decode_total"] else 0.0),
        ("gauge", "prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
         _rate(m["n_prompt_tokens_processed_total"], m["t_prompt_processing_total"])),
        ("gauge", "predicted_tokens_seconds", "Average generation throughput in tokens/s.",
         _rate(m["n_gen_steps_total"], m["t_tokens_generation_total"])),  # over decode steps, as llama-server
        ("gauge", "requests_processing", "Number of requests processing.", m["n_requests_processing"]),
        ("gauge", "requests_deferred", "Number of requests deferred (waiting for a slot).", m["n_requests_deferred"]),
        ("gauge", "kv_cache_tokens", "KV cells in use.", m["kv_cells_used"]),
        ("gauge", "kv_cells_used", "KV cells in use.", m["kv_cells_used"]),
        ("gauge", "kv_cells_total", "KV cells allocated.", m["kv_cells_total"]),
        ("counter", "prompt_tokens_cached_total", "Prompt tokens found in the slot's cache (the prefix cache's hits).",
         m["n_prompt_tokens_cached_total"]),
        ("gauge", "kv_cells_cached", "KV cells kept by idle slots' prompt caches.", m["kv_cells_cached"]),
        ("gauge", "kv_cells_active", "KV cells held by requests in flight.", m["kv_cells_used"] - m["kv_cells_cached"]),
        ("gauge", "kv_cache_usage_ratio", "KV cells in use / allocated.",
         m["kv_cells_used"] / m["kv_cells_total"] if m["kv_cells_total"] else 0.0),
        ("gauge", "prompt_cache_bytes", "Bytes held by the host-memory prompt cache (--cache-ram).", m["prompt_cache_bytes"]),
        ("gauge", "prompt_cache_prompts", "Prompts held by the host-memory prompt cache.", m["prompt_cache_prompts"]),
        ("gauge", "prompt_cache_tokens", "Tokens held by the host-memory prompt cache.", m["prompt_cache_tokens"]),
        ("gauge", "prompt_cache_limit_bytes", "The host-memory prompt cache's size limit (0: off or no limit).",
         m["prompt_cache_limit_bytes"]),
        ("counter", "spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", m["n_draft_tokens"]),
        ("counter", "spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model",
         m["n_draft_accepted"]),
        ("counter", "spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
         m["n_draft_verif_steps"]),
    ]
    out: list[str] = []
    for kind, name, help_, v in rows:
        out.append(f"# HELP llamacpp:{name} {help_}")
        out.append(f"# TYPE llamacpp:{name} {kind}")
        out.append(f"llamacpp:{name} {float(v):g}" if isinstance(v, float) else f"llamacpp:{name} {v}")
    return "\n".join(out) + "\n"
