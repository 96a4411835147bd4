"""Write a tiny gpt-oss GGUF (llama.cpp's LLM_ARCH_OPENAI_MOE) for fast tests: random weights of a
fixed seed, real tensor names and keys, tiny_model's GPT-2 byte vocabulary with the gpt-4o
pre-tokenizer.  tiny_family.write_tiny_family(arch="gpt-oss") calls it.

Chosen so each part of the architecture moves the top token (tests/test_gptoss.py plants
defects): 2 layers (layer 0 in a 16-cell sliding window, layer 1 full), 4 experts top-2 with
biases on the router and every expert product, gate/up weights large enough that
swiglu_oai's clamp at 7 bites, attention sinks around 1, Q/K/V and output biases, and YaRN
(factor 8 over an original context of 512, base 10000, head size 32: correction dims 1..8, so
the ramp, the interpolated pairs and the 1 + 0.1 ln 8 scale all act).  weight_type MXFP4: the
experts in MXFP4 (as the gpt-oss releases), the rest F16; the router, biases and sinks F32."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from tiny_model import add_tiny_vocab, tiny_vocab

F16 = gguf.GGMLQuantizationType.F16
MXFP4 = gguf.GGMLQuantizationType.MXFP4
GPT_OSS_KEYS = {"attention.sliding_window": 16, "rope.scaling.type": "yarn", "rope.scaling.factor": 8.0,
                "rope.scaling.original_context_length": 512}


def write_tiny_gptoss(path: Path, weight_type: gguf.GGMLQuantizationType = F16, n_embd: int = 64, n_layer: int = 2,
                      n_head: int = 4, n_head_kv: int = 2, head_dim: int = 32, n_expert: int = 4,
                      n_expert_used: int = 2, n_ff_exp: int = 64, seed: int = 0, extra_keys: dict | None = None,
                      extra_tensors: tuple[str, ...] = (), **_unused) -> Path:
    """extra_keys: "gpt-oss.<key>" -> value (None: leave one of GPT_OSS_KEYS out);
    extra_tensors: 1-D F32 tensors [n_embd] the architecture does not read."""
    from tiny_family import FILE_TYPES, _vt, quantize_blocks

    arch = "gpt-oss"
    rng = np.random.default_rng(seed)
    tokens, types, merges = tiny_vocab()
    n_vocab, d = len(tokens), head_dim
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff_exp)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(d)
    w.add_value_length(d)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_expert_used)
    w.add_file_type(int(FILE_TYPES[weight_type] if weight_type != MXFP4 else gguf.LlamaFileType.MOSTLY_MXFP4_MOE))
    for k, v in {**GPT_OSS_KEYS, **(extra_keys or {})}.items():
        if v is not None:
            w.add_key_value(f"{arch}.{k}", v, _vt(v))
    add_tiny_vocab(w, tokens, types, merges, pre="gpt-4o")

    def matrix(name: str, shape: tuple[int, ...], scale: float, expert: bool = False) -> None:
        a = (rng.standard_normal(shape) * scale).astype(np.float32)
        if expert and weight_type == MXFP4:
            w.add_tensor(name, quantize_blocks(a, MXFP4), raw_dtype=MXFP4)
        elif weight_type == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, a.astype(np.float16))

    def vector(name: str, shape: int | tuple[int, ...], mean: float, scale: float) -> None:
        w.add_tensor(name, (mean + rng.standard_normal(shape) * scale).astype(np.float32))

    matrix("token_embd.weight", (n_vocab, n_embd), 0.6)
    vector("output_norm.weight", n_embd, 1.0, 0.1)
    matrix("output.weight", (n_vocab, n_embd), 0.6)
    s_in = 1.0 / np.sqrt(n_embd)
    for il in range(n_layer):
        p = f"blk.{il}."
        vector(p + "attn_norm.weight", n_embd, 1.0, 0.1)
        matrix(p + "attn_q.weight", (n_head * d, n_embd), 2 * s_in)
        matrix(p + "attn_k.weight", (n_head_kv * d, n_embd), 2 * s_in)
        matrix(p + "attn_v.weight", (n_head_kv * d, n_embd), s_in)
        vector(p + "attn_q.bias", n_head * d, 0.0, 0.5)
        vector(p + "attn_k.bias", n_head_kv * d, 0.0, 0.5)
        vector(p + "attn_v.bias", n_head_kv * d, 0.0, 0.2)
        matrix(p + "attn_output.weight", (n_embd, n_head * d), 2.0 / np.sqrt(n_head * d))
        vector(p + "attn_output.bias", n_embd, 0.0, 0.3)
        vector(p + "attn_sinks.weight", n_head, 1.0, 1.0)
        vector(p + "post_attention_norm.weight", n_embd, 1.0, 0.1)
        w.add_tensor(p + "ffn_gate_inp.weight", (rng.standard_normal((n_expert, n_embd)) * 3 * s_in).astype(np.float32))
        vector(p + "ffn_gate_inp.bias", n_expert, 0.0, 0.5)
        matrix(p + "ffn_gate_exps.weight", (n_expert, n_ff_exp, n_embd), 4 * s_in, expert=True)
        vector(p + "ffn_gate_exps.bias", (n_expert, n_ff_exp), 0.0, 0.5)
        matrix(p + "ffn_up_exps.weight", (n_expert, n_ff_exp, n_embd), 4 * s_in, expert=True)
        vector(p + "ffn_up_exps.bias", (n_expert, n_ff_exp), 0.0, 0.5)
        matrix(p + "ffn_down_exps.weight", (n_expert, n_embd, n_ff_exp), 0.3 / np.sqrt(n_ff_exp), expert=True)
        vector(p + "ffn_down_exps.bias", (n_expert, n_embd), 0.0, 0.3)
    for name in extra_tensors:
        vector(name, n_embd, 0.0, 1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
