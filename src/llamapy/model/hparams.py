"""HParams: the model's hyperparameters from the GGUF "{arch}.*" keys (llama_hparams)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..gguf.header import GGUFHeader


@dataclass(frozen=True, slots=True)
class HParams:
    arch: str
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_embd_head_k: int
    n_embd_head_v: int
    n_vocab: int
    f_norm_rms_eps: float
    rope_freq_base: float
    rope_freq_base_swa: float
    rope_freq_scale: float
    n_rot: int
    n_swa: int = 0
    swa_layers: tuple[bool, ...] = field(default=())
    causal_attn: bool = True
    f_attention_scale: float = 0.0  # 0: 1/sqrt(n_embd_head_k)

    # llama_hparams::n_embd_k_gqa(il): width of one token's K in one layer
    def n_embd_k_gqa(self, il: int = 0) -> int:
        return self.n_embd_head_k * self.n_head_kv

    def n_embd_v_gqa(self, il: int = 0) -> int:
        return self.n_embd_head_v * self.n_head_kv

    def is_swa(self, il: int) -> bool:
        return bool(self.swa_layers) and self.swa_layers[il]

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv


def _swa_pattern(n_layer: int, period: int) -> tuple[bool, ...]:
    """llama.cpp set_swa_pattern(period): every period-th layer is dense, the others SWA."""
    return tuple((il % period) < (period - 1) for il in range(n_layer))


def hparams_from_gguf(f: GGUFHeader) -> HParams:
    """From a GGUFHeader (header only) or a GGUFFile (a subclass)."""
    arch = f.arch

    def key(name: str, default=None, required: bool = False):
        v = f.get(f"{arch}.{name}", default)
        if v is None and required:
            raise ValueError(f"{f.path.name}: missing metadata key {arch}.{name}")
        return v

    n_embd = int(key("embedding_length", required=True))
    n_head = int(key("attention.head_count", required=True))
    n_head_kv = int(key("attention.head_count_kv", n_head))
    head_k = int(key("attention.key_length", n_embd // n_head))
    head_v = int(key("attention.value_length", n_embd // n_head))
    n_layer = int(key("block_count", required=True))
    tokens = f.get("tokenizer.ggml.tokens")
    n_vocab = int(key("vocab_size", len(tokens) if tokens is not None else 0))
    if n_vocab == 0 and "token_embd.weight" in f.tensors:
        n_vocab = f.tensors["token_embd.weight"].ne[1]
    freq_base = float(key("rope.freq_base", 10000.0))
    scale = key("rope.scaling.factor", None)
    n_swa = int(key("attention.sliding_window", 0) or 0)
    swa_layers: tuple[bool, ...] = ()
    freq_base_swa = freq_base
    if arch == "gemma3" and n_swa > 0:
        swa_layers = _swa_pattern(n_layer, 6)
        # llama.cpp: {arch}.rope.freq_base_swa when present, else 10000 for gemma3's local layers
        freq_base_swa = float(key("rope.freq_base_swa", 10000.0))
    return HParams(
        arch=arch,
        n_ctx_train=int(key("context_length", required=True)),
        n_embd=n_embd,
        n_layer=n_layer,
        n_ff=int(key("feed_forward_length", 0)),
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_embd_head_k=head_k,
        n_embd_head_v=head_v,
        n_vocab=n_vocab,
        f_norm_rms_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_freq_base=freq_base,
        rope_freq_base_swa=freq_base_swa,
        rope_freq_scale=1.0 / float(scale) if scale else 1.0,
        n_rot=int(key("rope.dimension_count", head_k)),
        n_swa=n_swa,
        swa_layers=swa_layers,
    )
