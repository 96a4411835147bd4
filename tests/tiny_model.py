"""Write tiny llama-architecture GGUF files for fast tests (random weights, real format).

Vocabulary: the 256 GPT-2 byte tokens, a few merges and <|im_start|>/<|im_end|>/<|endoftext|>
control tokens, so the real tokenizer path is exercised too."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def _byte_tokens() -> list[str]:
    """The 256 GPT-2 byte-level characters, in byte order (llamapy's own table, inverted)."""
    from llamapy.tokenizer import _byte_decoder

    by_byte = {b: ch for ch, b in _byte_decoder().items()}
    return [by_byte[b] for b in range(256)]


# types gguf cannot quantize (K-quants, IQ4_NL, IQ4_XS): random blocks, their f16 scales set so that weights stay
# about +-0.5 (offsets of the f16 fields in a block, and the largest |sub-scale * q|)
K_PACK = {gguf.GGMLQuantizationType.Q2_K: ((80, 82), 45), gguf.GGMLQuantizationType.Q3_K: ((108,), 128),
          gguf.GGMLQuantizationType.Q4_K: ((0, 2), 945), gguf.GGMLQuantizationType.Q5_K: ((0, 2), 1953),
          gguf.GGMLQuantizationType.Q6_K: ((208,), 4064), gguf.GGMLQuantizationType.IQ4_NL: ((0,), 127),
          gguf.GGMLQuantizationType.IQ4_XS: ((0,), 4064)}  # gguf has no quantizer for these either


def tiny_vocab(extra_control: tuple[str, ...] = ()) -> tuple[list[str], list[gguf.TokenType], list[str]]:
    """The tiny models' vocabulary: the byte tokens, five merges and three control tokens,
    as (tokens, token types, merges) in the order a GGUF writes them.  extra_control: more
    control tokens (FIM's), placed before the three (which keep their places from the end)."""
    tokens = _byte_tokens()
    merges = ["Ġ t", "h e", "Ġt he", "i n", "a n"]
    tokens += [m.replace(" ", "") for m in merges]
    tokens += list(extra_control)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens += specials
    n_ctl = len(specials) + len(extra_control)
    types = [gguf.TokenType.NORMAL] * (len(tokens) - n_ctl) + [gguf.TokenType.CONTROL] * n_ctl
    return tokens, types, merges


def add_tiny_vocab(w: gguf.GGUFWriter, tokens: list[str], types: list[gguf.TokenType], merges: list[str],
                   pre: str = "default") -> None:
    """tiny_vocab()'s keys as a GGUF writes them: a GPT-2 BPE (pre-tokenizer `pre`), <|endoftext|>
    BOS, <|im_end|> EOS, no BOS added."""
    n_vocab = len(tokens)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(n_vocab - 3)
    w.add_eos_token_id(n_vocab - 1)
    w.add_add_bos_token(False)


def quantize_or_pack(a: np.ndarray, qtype: gguf.GGMLQuantizationType, rng: np.random.Generator) -> np.ndarray:
    """a [n_out, n_in] float32 in GGUF's blocks of qtype: gguf's quantizer where it has one,
    else (the K-quants, IQ4_NL, IQ4_XS) random hand-packed blocks of about a's magnitude, uint8 [n_out, row bytes]."""
    if qtype not in K_PACK:
        return gguf.quants.quantize(a, qtype)
    offsets, top = K_PACK[qtype]
    be, bb = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(a.size // be, bb), dtype=np.uint8)
    for off in offsets:
        h = (rng.uniform(0.2, 1.0, size=len(b)) * 0.5 / top).astype(np.float16)
        b[:, off : off + 2] = h.view(np.uint8).reshape(len(b), 2)
    return b.reshape(a.shape[0], -1)


def write_tiny_llama(
    path: Path,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_ctx_train: int = 4096,
    seed: int = 0,
    weight_type: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32,
    arch: str = "llama",
    extra_control: tuple[str, ...] = (),
    embd_type: gguf.GGMLQuantizationType | None = None,  # token_embd's (the tied output's) type; None: weight_type
) -> Path:
    rng = np.random.default_rng(seed)
    tokens, types, merges = tiny_vocab(extra_control)
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_vocab_size(n_vocab)
    add_tiny_vocab(w, tokens, types, merges)

    def add(name: str, shape: tuple[int, ...], scale: float = 0.2, qtype=weight_type) -> None:
        a = (rng.standard_normal(shape) * scale).astype(np.float32)
        if len(shape) == 1:
            a = 1.0 + 0.1 * a
            qtype = gguf.GGMLQuantizationType.F32
        if qtype != gguf.GGMLQuantizationType.F32:
            q = quantize_or_pack(a, qtype, rng)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        else:
            w.add_tensor(name, a)

    d = n_embd // n_head
    add("token_embd.weight", (n_vocab, n_embd), 1.0, weight_type if embd_type is None else embd_type)
    add("output_norm.weight", (n_embd,))
    for il in range(n_layer):
        p = f"blk.{il}."
        add(p + "attn_norm.weight", (n_embd,))
        add(p + "attn_q.weight", (n_head * d, n_embd))
        add(p + "attn_k.weight", (n_head_kv * d, n_embd))
        add(p + "attn_v.weight", (n_head_kv * d, n_embd))
        add(p + "attn_output.weight", (n_embd, n_head * d))
        add(p + "ffn_norm.weight", (n_embd,))
        add(p + "ffn_gate.weight", (n_ff, n_embd))
        add(p + "ffn_up.weight", (n_ff, n_embd))
        add(p + "ffn_down.weight", (n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
