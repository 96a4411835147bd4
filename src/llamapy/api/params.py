"""llama-cpp-python's Llama(...) keyword arguments read into llamapy's ContextParams; the
ones llamapy has no use for are named once in the log (ignored_params)."""
from __future__ import annotations

from typing import Any

from ..params import ContextParams

# llama-cpp-python's Llama.__init__ parameters llamapy reads besides its named ones
READ = {"use_mmap", "offload_kqv", "swa_full"}
# ...and those it accepts without effect here (llama.cpp features llamapy does not have, or
# settings that change nothing in llamapy: mlock, NUMA, LoRA, RoPE overrides, perf counters)
KNOWN_IGNORED = {
    "split_mode", "main_gpu", "tensor_split", "rpc_servers", "vocab_only", "use_mlock", "kv_overrides",
    "n_threads_batch", "rope_scaling_type", "rope_freq_base", "rope_freq_scale",
    "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_orig_ctx",
    "logits_all", "op_offload", "no_perf", "last_n_tokens_size", "lora_base", "lora_scale", "lora_path",
    "numa", "chat_handler", "tokenizer", "spm_infill",
}


def device_for(n_gpu_layers: int) -> str:
    """llama.cpp's -ngl on one device: 0 keeps the model on the CPU; any other count puts it
    on the GPU when torch sees one (the whole model: llamapy does not split layers)."""
    if n_gpu_layers == 0:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def kv_type(t: Any, default: str = "f16") -> str:
    """type_k / type_v: llama-cpp-python passes ggml_type ints; names are accepted too."""
    if t is None:
        return default
    if isinstance(t, str):
        return t
    names = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 20: "iq4_nl", 30: "bf16"}
    if t not in names:
        raise ValueError(f"type_k/type_v: ggml type {t} is not a KV cache type llamapy has ({', '.join(names.values())})")
    return names[t]


def context_params(n_ctx: int, n_batch: int, n_ubatch: int, n_threads: int | None, n_gpu_layers: int,
                   flash_attn: bool, type_k: Any, type_v: Any, rest: dict[str, Any]) -> ContextParams:
    """One sequence (the Llama's), its own stream; n_ctx 0: the model's trained context."""
    return ContextParams(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=min(n_ubatch, n_batch), n_seq_max=1,
                         type_k=kv_type(type_k), type_v=kv_type(type_v), flash_attn="on" if flash_attn else "auto",
                         n_threads=n_threads or 0, device=device_for(n_gpu_layers),
                         offload_kqv=bool(rest.get("offload_kqv", True)), swa_full=bool(rest.get("swa_full", False)))


def ignored_params(rest: dict[str, Any]) -> list[str]:
    """The keyword arguments that change nothing here, sorted."""
    return sorted(k for k in rest if k not in READ)
