"""Write a tiny random BERT GGUF (llama.cpp's tensor names and keys, a small WordPiece vocab)
for the embedding tests and scripts/ref_embeddings.py (same seed: the same bytes)."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

WORDS = ("the", "cat", "sat", "on", "mat", "hello", "world", "this", "is", "a", "test", "dog", "runs", "fast",
         "quick", "brown", "fox", "jumps", "over", "lazy", "embedding", "model", "text", "search")
PUNCT = (",", ".", "!", "?", "'", "-")
LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def tiny_wpm_vocab() -> list[str]:
    """[PAD] [UNK] [CLS] [SEP] [MASK], whole words (▁-marked, llama.cpp's WPM spelling), every
    letter as a word start and as a continuation, and punctuation: any lowercase ASCII text
    tokenizes without [UNK]."""
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks += ["▁" + w for w in WORDS] + ["▁" + c for c in LETTERS] + list(LETTERS) + ["▁" + p for p in PUNCT]
    toks += ["ing", "ed", "er"]
    return list(dict.fromkeys(toks))  # each text once ("▁a" is a word and a letter)


def write_tiny_bert(path: Path, n_embd: int = 64, n_layer: int = 2, n_head: int = 4, n_ff: int = 128,
                    n_ctx_train: int = 128, seed: int = 0, pooling: int = 1, rank_head: bool = False,
                    arch: str = "bert") -> Path:
    """pooling: the GGUF's bert.pooling_type (1 mean, 2 cls, 4 rank); rank_head: write cls,
    cls.output (one label) as a bge-reranker does.  arch "nomic-bert": no position_embd (RoPE,
    freq_base 1000), Q|K|V fused in attn_qkv, a SwiGLU FFN (ffn_gate, ffn_up, ffn_down) without
    biases, as nomic-embed-text's GGUFs."""
    rng = np.random.default_rng(seed)
    tokens = tiny_wpm_vocab()
    n_vocab = len(tokens)
    nomic = arch == "nomic-bert"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_layer_norm_eps(1e-12)
    if nomic:
        w.add_rope_freq_base(1000.0)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType(pooling))
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL] * 5 + [gguf.TokenType.NORMAL] * (n_vocab - 5))
    w.add_token_type_count(2)
    w.add_pad_token_id(0)
    w.add_unk_token_id(1)
    w.add_bos_token_id(2)  # [CLS]
    w.add_sep_token_id(3)
    w.add_mask_token_id(4)
    if rank_head:
        w.add_classifier_output_labels(["LABEL_0"])

    def add(name: str, shape: tuple[int, ...], scale: float = 0.2, base: float = 0.0) -> None:
        w.add_tensor(name, (base + rng.standard_normal(shape) * scale).astype(np.float32))

    add("token_embd.weight", (n_vocab, n_embd), 1.0)
    add("token_types.weight", (2, n_embd), 0.5)
    if not nomic:
        add("position_embd.weight", (n_ctx_train, n_embd), 0.5)
    add("token_embd_norm.weight", (n_embd,), 0.1, 1.0)
    add("token_embd_norm.bias", (n_embd,), 0.1)
    for il in range(n_layer):
        p = f"blk.{il}."
        if nomic:
            add(p + "attn_qkv.weight", (3 * n_embd, n_embd))
            add(p + "attn_output.weight", (n_embd, n_embd))
            add(p + "attn_output_norm.weight", (n_embd,), 0.1, 1.0)
            add(p + "attn_output_norm.bias", (n_embd,), 0.1)
            for x in ("gate", "up"):
                add(p + f"ffn_{x}.weight", (n_ff, n_embd))
            add(p + "ffn_down.weight", (n_embd, n_ff))
            add(p + "layer_output_norm.weight", (n_embd,), 0.1, 1.0)
            add(p + "layer_output_norm.bias", (n_embd,), 0.1)
            continue
        for x in "qkv":
            add(p + f"attn_{x}.weight", (n_embd, n_embd))
            add(p + f"attn_{x}.bias", (n_embd,), 0.1)
        add(p + "attn_output.weight", (n_embd, n_embd))
        add(p + "attn_output.bias", (n_embd,), 0.1)
        add(p + "attn_output_norm.weight", (n_embd,), 0.1, 1.0)
        add(p + "attn_output_norm.bias", (n_embd,), 0.1)
        add(p + "ffn_up.weight", (n_ff, n_embd))
        add(p + "ffn_up.bias", (n_ff,), 0.1)
        add(p + "ffn_down.weight", (n_embd, n_ff))
        add(p + "ffn_down.bias", (n_embd,), 0.1)
        add(p + "layer_output_norm.weight", (n_embd,), 0.1, 1.0)
        add(p + "layer_output_norm.bias", (n_embd,), 0.1)
    if rank_head:
        add("cls.weight", (n_embd, n_embd))
        add("cls.bias", (n_embd,), 0.1)
        add("cls.output.weight", (1, n_embd))
        add("cls.output.bias", (1,), 0.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
