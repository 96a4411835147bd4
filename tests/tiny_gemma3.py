"""Write tiny gemma3-architecture GGUF files for fast tests (random weights, real format):
every 6th layer global, the others sliding-window (n_swa), Q/K norms, post norms, tied output.
The vocabulary is tiny_model's GPT-2 byte vocabulary (the architecture does not care)."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from tiny_model import _byte_tokens


def write_tiny_gemma3(
    path: Path,
    n_embd: int = 64,
    n_layer: int = 6,
    n_head: int = 2,
    n_head_kv: int = 1,
    head_dim: int = 32,
    n_ff: int = 128,
    n_swa: int = 16,
    n_ctx_train: int = 32768,
    seed: int = 0,
    weight_types: dict[str, gguf.GGMLQuantizationType] | None = None,
) -> Path:
    """weight_types: a GGUF type per matrix name suffix ("attn_q", "ffn_down", ...; the rest
    F32), quantized with gguf's quantizer (types it can quantize: Q4_0 ... Q8_0, BF16, F16)."""
    rng = np.random.default_rng(seed)
    tokens = _byte_tokens() + ["<bos>", "<eos>"]
    types = [gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.CONTROL] * 2
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(n_swa)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([])
    w.add_bos_token_id(n_vocab - 2)
    w.add_eos_token_id(n_vocab - 1)
    w.add_add_bos_token(False)

    def add(name: str, shape: tuple[int, ...], scale: float = 0.2) -> None:
        a = (rng.standard_normal(shape) * scale).astype(np.float32)
        qt = (weight_types or {}).get(name.split(".")[-2])
        if len(shape) == 1:
            w.add_tensor(name, 1.0 + 0.1 * a)
        elif qt is None or qt == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, gguf.quants.quantize(a, qt), raw_dtype=qt)

    add("token_embd.weight", (n_vocab, n_embd), 0.5)
    add("output_norm.weight", (n_embd,))
    for il in range(n_layer):
        p = f"blk.{il}."
        add(p + "attn_norm.weight", (n_embd,))
        add(p + "attn_q.weight", (n_head * head_dim, n_embd))
        add(p + "attn_k.weight", (n_head_kv * head_dim, n_embd))
        add(p + "attn_v.weight", (n_head_kv * head_dim, n_embd))
        add(p + "attn_output.weight", (n_embd, n_head * head_dim))
        add(p + "attn_q_norm.weight", (head_dim,))
        add(p + "attn_k_norm.weight", (head_dim,))
        add(p + "post_attention_norm.weight", (n_embd,))
        add(p + "ffn_norm.weight", (n_embd,))
        add(p + "ffn_gate.weight", (n_ff, n_embd))
        add(p + "ffn_up.weight", (n_ff, n_embd))
        add(p + "ffn_down.weight", (n_embd, n_ff))
        add(p + "post_ffw_norm.weight", (n_embd,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
