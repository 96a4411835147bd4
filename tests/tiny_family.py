"""Write tiny GGUF files of the llama family (llama, qwen2, qwen3, qwen3moe, llama with
experts), gemma2 and phi3 for fast tests: random weights of a fixed seed, real format,
tiny_model's GPT-2 byte vocabulary with a few merges.

Deterministic: the same arguments write the same bytes (the reference logits in
tests/data/ref_logits/ were made by llama.cpp from files written here; their sha256 is
recorded beside them, scripts/ref_logits_llamacpp.py).  Weights are scaled so the next-token
distributions are peaked (the top token typically holds a large share of the mass), so
top-1 agreement is a meaningful check.

    qwen2: Q/K/V biases, RoPE NEOX, output untied unless tied=True
    qwen3: per-head Q/K RMSNorms, head size (key_length) 32 != n_embd / n_head, tied output
    llama: rope_freqs=True adds Llama 3's rope_freqs.weight [n_rot/2]
    gemma2: post-attention and post-FFN norms, head size 32, output tied (always), and
            GEMMA2_KEYS: a 16-token window on the even layers and soft-capping strong enough
            to matter for these weights (the real models' 4096, 50 and 30 would not)
    phi3: attn_qkv.weight (Q | K | V rows) and ffn_up.weight [2 n_ff] (gate | up rows), the
          same draws as the others' separate tensors; PHI3_KEYS: a 16-token window that
          llama.cpp (and llamapy) do not apply; longrope=True adds LongRoPE's
          rope_factors_long/short.weight [n_rot/2] (LONGROPE_FACTORS: far from 1 and from each
          other on the fast pairs, where 64 positions turn far enough to tell them apart; the
          context's choice between them is keyed by rope.scaling.original_context_length)
    qwen3moe: qwen3's attention, n_expert (default 8) experts of width n_ff_exp (default 64,
          expert_feed_forward_length), top n_expert_used (2); the router ffn_gate_inp in F32
    llama with n_expert > 0: Mixtral's layout, experts of width n_ff"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from tiny_model import add_tiny_vocab, tiny_vocab

F32 = gguf.GGMLQuantizationType.F32
F16 = gguf.GGMLQuantizationType.F16
Q8_0 = gguf.GGMLQuantizationType.Q8_0
GEMMA2_KEYS = {"attention.sliding_window": 16, "attn_logit_softcapping": 10.0, "final_logit_softcapping": 20.0}
PHI3_KEYS = {"attention.sliding_window": 16}
# Qwen3-Reranker's rerank prompt (convert_hf_to_gguf's), {query} and {document} filled in by the server
QWEN3_RERANK_TEMPLATE = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
                         "the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
                         "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that "
                         "answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
                         "<|im_start|>assistant\n<think>\n\n</think>\n\n")
LONGROPE_FACTORS = {"long": (1.0, 2.5, 4.0, 1.5, 6.0, 3.0, 8.0, 12.0), "short": (1.0, 1.2, 0.8, 1.5, 1.1, 2.0, 1.3, 1.0)}
FILE_TYPES = {F32: gguf.LlamaFileType.ALL_F32, F16: gguf.LlamaFileType.MOSTLY_F16, Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
              gguf.GGMLQuantizationType.BF16: gguf.LlamaFileType.MOSTLY_BF16,
              gguf.GGMLQuantizationType.IQ4_NL: gguf.LlamaFileType.MOSTLY_IQ4_NL,
              gguf.GGMLQuantizationType.IQ4_XS: gguf.LlamaFileType.MOSTLY_IQ4_XS,
              gguf.GGMLQuantizationType.MXFP4: gguf.LlamaFileType.MOSTLY_MXFP4_MOE}


def quantize_blocks(a: np.ndarray, qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """a [n_out, n_in] float32 in qtype's blocks: gguf's quantizer, or for IQ4_NL and IQ4_XS (which
    gguf lacks) llamapy's, whose bytes equal ggml's quantize_row_iq4_nl_ref / _iq4_xs_ref
    (tests/test_quants_pack.py)."""
    if qtype in (gguf.GGMLQuantizationType.IQ4_NL, gguf.GGMLQuantizationType.IQ4_XS):
        import torch

        from llamapy.gguf.quants import quantize

        return quantize(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)), qtype).numpy()
    return gguf.quants.quantize(a, qtype)


def write_tiny_family(
    path: Path,
    arch: str = "qwen2",
    weight_type: gguf.GGMLQuantizationType = F16,
    tied: bool | None = None,
    rope_freqs: bool = False,
    longrope: bool = False,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int | None = None,
    n_ff: int = 128,
    seed: int = 0,
    extra_tensors: tuple[str, ...] = (),
    extra_keys: dict | None = None,
    n_expert: int | None = None,
    n_expert_used: int = 2,
    n_ff_exp: int = 64,
    rerank_head: bool = False,
) -> Path:
    """tied None: the family's usual (qwen2 untied, the others tied).  head_dim None: qwen3's
    and gemma2's 32, else n_embd / n_head.  extra_tensors: 1-D F32 tensors [n_embd] added as they are
    (a file the architecture does not read); extra_keys: "{arch}.<key>" -> value (None: not
    written).  arch "gpt-oss": tests/tiny_gptoss.py's writer.  rerank_head (qwen3): Qwen3-Reranker's
    layout, as convert_hf_to_gguf writes it: classifier.output_labels ["yes", "no"], cls.output.weight
    [2, n_embd] (drawn last: the other tensors keep their bytes), pooling_type 4 (rank) and
    QWEN3_RERANK_TEMPLATE as tokenizer.chat_template.rerank."""
    if arch == "gpt-oss":
        from tiny_gptoss import write_tiny_gptoss

        return write_tiny_gptoss(path, weight_type, n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv,
                                 seed=seed, extra_keys=extra_keys, extra_tensors=extra_tensors,
                                 **({"n_expert": n_expert} if n_expert else {}))
    rng = np.random.default_rng(seed)
    tied = arch != "qwen2" if tied is None else tied
    d = head_dim or (32 if arch in ("qwen3", "qwen3moe", "gemma2") else n_embd // n_head)
    n_expert = (8 if arch == "qwen3moe" else 0) if n_expert is None else n_expert
    n_ff_e = n_ff_exp if arch == "qwen3moe" else n_ff
    if arch in ("gemma2", "phi3"):
        extra_keys = {**(GEMMA2_KEYS if arch == "gemma2" else PHI3_KEYS), **(extra_keys or {})}
    tokens, types, merges = tiny_vocab()
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    if d != n_embd // n_head:
        w.add_key_length(d)
        w.add_value_length(d)
    w.add_rope_freq_base(10000.0 if arch in ("llama", "gemma2", "phi3") else 1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    if n_expert:
        w.add_expert_count(n_expert)
        w.add_expert_used_count(n_expert_used)
        if arch == "qwen3moe":
            w.add_expert_feed_forward_length(n_ff_exp)
    w.add_file_type(int(FILE_TYPES[weight_type]))  # general.file_type, as llama-quantize writes it
    for k, v in (extra_keys or {}).items():
        if v is None:  # a key the architecture's defaults (GEMMA2_KEYS) would write, left out
            continue
        w.add_key_value(f"{arch}.{k}", v, _vt(v))
    add_tiny_vocab(w, tokens, types, merges)

    fused: dict[str, list[np.ndarray]] = {}  # phi3: the parts of a fused tensor drawn so far

    def matrix(name: str, shape: tuple[int, ...], scale: float) -> None:
        a = (rng.standard_normal(shape) * scale).astype(np.float32)
        if arch == "phi3":
            blk, _, t = name.rpartition(".weight")[0].rpartition(".")
            into = {"attn_q": "attn_qkv", "attn_k": "attn_qkv", "attn_v": "attn_qkv", "ffn_gate": "ffn_up",
                    "ffn_up": "ffn_up"}.get(t)
            if into is not None:
                parts = fused.setdefault(into, [])
                parts.append(a)
                if len(parts) < (3 if into == "attn_qkv" else 2):
                    return
                name, a = f"{blk}.{into}.weight", np.concatenate(fused.pop(into))
        if weight_type == F32:
            w.add_tensor(name, a)
        elif weight_type == F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, quantize_blocks(a, weight_type), raw_dtype=weight_type)

    def vector(name: str, n: int, mean: float, scale: float) -> None:
        w.add_tensor(name, (mean + rng.standard_normal(n) * scale).astype(np.float32))

    # embeddings and output of std ~0.6: logits of std ~5 over 264 tokens, a peaked softmax
    matrix("token_embd.weight", (n_vocab, n_embd), 0.6)
    vector("output_norm.weight", n_embd, 1.0, 0.1)
    if not tied:
        matrix("output.weight", (n_vocab, n_embd), 0.6)
    if rope_freqs:  # Llama 3's factors: 1 for the fast pairs, up to 8 for the slow ones
        w.add_tensor("rope_freqs.weight", np.geomspace(1.0, 8.0, d // 2).astype(np.float32))
    if longrope:  # Phi-3's LongRoPE factor sets (n_rot/2 = 8 at the default shape)
        for which in ("long", "short"):
            w.add_tensor(f"rope_factors_{which}.weight", np.resize(LONGROPE_FACTORS[which], d // 2).astype(np.float32))
    s_in, s_out = 1.0 / np.sqrt(n_embd), 1.0 / np.sqrt(n_ff)
    for il in range(n_layer):
        p = f"blk.{il}."
        vector(p + "attn_norm.weight", n_embd, 1.0, 0.1)
        matrix(p + "attn_q.weight", (n_head * d, n_embd), 2 * s_in)
        matrix(p + "attn_k.weight", (n_head_kv * d, n_embd), 2 * s_in)
        matrix(p + "attn_v.weight", (n_head_kv * d, n_embd), s_in)
        if arch == "qwen2":
            vector(p + "attn_q.bias", n_head * d, 0.0, 0.5)
            vector(p + "attn_k.bias", n_head_kv * d, 0.0, 0.5)
            vector(p + "attn_v.bias", n_head_kv * d, 0.0, 0.2)
        matrix(p + "attn_output.weight", (n_embd, n_head * d), 2.0 / np.sqrt(n_head * d))
        if arch == "gemma2":  # 4: the blocks' normed outputs weigh as the sqrt(n_embd)-scaled embedding
            vector(p + "post_attention_norm.weight", n_embd, 4.0, 0.4)
        if arch in ("qwen3", "qwen3moe"):  # above 1: normed Q and K still give sharp attention
            vector(p + "attn_q_norm.weight", d, 2.0, 0.4)
            vector(p + "attn_k_norm.weight", d, 2.0, 0.4)
        vector(p + "ffn_norm.weight", n_embd, 1.0, 0.1)
        if n_expert:  # the router (F32, as llama-quantize leaves it) and the experts' 3-D stacks
            w.add_tensor(p + "ffn_gate_inp.weight", (rng.standard_normal((n_expert, n_embd)) * 3 * s_in).astype(np.float32))
            matrix(p + "ffn_gate_exps.weight", (n_expert, n_ff_e, n_embd), s_in)
            matrix(p + "ffn_up_exps.weight", (n_expert, n_ff_e, n_embd), s_in)
            matrix(p + "ffn_down_exps.weight", (n_expert, n_embd, n_ff_e), 2 / np.sqrt(n_ff_e))
        else:
            matrix(p + "ffn_gate.weight", (n_ff, n_embd), s_in)
            matrix(p + "ffn_up.weight", (n_ff, n_embd), s_in)
            matrix(p + "ffn_down.weight", (n_embd, n_ff), 2 * s_out)
        if arch == "gemma2":
            vector(p + "post_ffw_norm.weight", n_embd, 4.0, 0.4)
    for name in extra_tensors:
        vector(name, n_embd, 0.0, 1.0)
    if rerank_head:
        w.add_pooling_type(gguf.PoolingType.RANK)
        w.add_classifier_output_labels(["yes", "no"])
        w.add_string("tokenizer.chat_template.rerank", QWEN3_RERANK_TEMPLATE)
        matrix("cls.output.weight", (2, n_embd), 0.05)  # logits of std ~0.5: scores spread over (0, 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _vt(v) -> gguf.GGUFValueType:
    if isinstance(v, bool):
        return gguf.GGUFValueType.BOOL
    if isinstance(v, int):
        return gguf.GGUFValueType.UINT32
    if isinstance(v, float):
        return gguf.GGUFValueType.FLOAT32
    return gguf.GGUFValueType.STRING
