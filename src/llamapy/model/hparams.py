"""HParams: the model's hyperparameters from the GGUF "{arch}.*" keys (llama_hparams).

hparams_from_gguf also checks what Model.load will rely on, so a malformed file gives one
GGUFError naming the key or tensor (and its byte offset) before any weight or vocabulary is
read: required keys present, every key of the right type and in range, every tensor of a
known architecture present with the shape the hyperparameters give (token_embd [n_embd,
n_vocab], blk.N.ffn_up [n_embd, n_ff], ...) and no other tensor (model/arch_tensors.py), no
key asking for a computation the architecture does not implement (model/arch_keys.py), and
the vocabulary's metadata consistent (its size against token_embd and {arch}.vocab_size,
scores/token types at least as long, special ids integers, a tokenizer model and
pre-tokenizer llamapy knows).  O(keys + tensors): no loop over the vocabulary's elements."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import gguf

from ..gguf.header import VT, ArrayRef, GGUFError, GGUFHeader, HeaderField, short_repr
from ..log import logger
from .arch_keys import MOE_ARCHS, check_keys
from .arch_tensors import ARCH_TENSORS, check_tensors, expected_tensors  # noqa: F401 (expected_tensors: re-exported)


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
    attn_soft_cap: bool = False  # llama_hparams::attn_soft_cap (gemma2): KQ soft-capped, so materialized
    n_expert: int = 0  # {arch}.expert_count: MoE FFN layers where > 0 (model/moe.py; llama, qwen3moe)
    n_expert_used: int = 0  # {arch}.expert_used_count: the top-k of the router
    n_ff_exp: int = 0  # one expert's FFN width (qwen3moe: expert_feed_forward_length; llama: n_ff)
    attn_sinks: bool = False  # gpt-oss: a learned logit per head in each softmax (blk.N.attn_sinks): no C tiles
    # llama_cparams' YaRN values (llama_context's constructor from the rope scaling keys; model/rope.py)
    yarn_ext_factor: float = 0.0  # 1 for rope.scaling.type yarn, else 0
    yarn_attn_factor: float = 1.0
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    n_ctx_orig_yarn: int = 0  # rope.scaling.original_context_length, else n_ctx_train

    @property
    def attn_plain(self) -> bool:
        """Is attention what all of llamapy's C attention kernels compute (no soft-capping, no
        sinks: the few-row kernel takes sinks, the tiles do not)?"""
        return not (self.attn_soft_cap or self.attn_sinks)
    pooling_type: int = -1  # {arch}.pooling_type (llama_pooling_type; -1 unspecified: none)
    f_norm_eps: float = 1e-12  # {arch}.attention.layer_norm_epsilon (LayerNorm models: bert)
    n_token_types: int = 0  # tokenizer.ggml.token_type_count (bert's token_types rows)
    n_cls_out: int = 1  # {arch}.classifier.output_labels' count (a rank head's outputs)

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


def _swa_layers(f: GGUFHeader, arch: str, n_layer: int, period: int) -> tuple[bool, ...]:
    """llama_model_base::load_swa_pattern: {arch}.attention.sliding_window_pattern, an array
    with each layer's flag or a period, else the architecture's period."""
    fld = f.fields.get(f"{arch}.attention.sliding_window_pattern")
    if fld is None:
        return _swa_pattern(n_layer, period)
    v = fld.value
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return _swa_pattern(n_layer, v)
    if isinstance(v, list) and len(v) == n_layer and all(isinstance(x, (bool, int)) for x in v):
        return tuple(bool(x) for x in v)
    raise GGUFError(f"{f.path.name}: metadata '{fld.name}' (key at byte {fld.offset}) = {short_repr(v)} is neither a "
                    f"period nor one flag per layer ({n_layer})")


# the sliding-window architectures' set_swa_pattern period: every period-th layer dense
_SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2}
_K = gguf.Keys.Tokenizer
_SPECIAL_ID_KEYS = (_K.BOS_ID, _K.EOS_ID, _K.EOT_ID, _K.EOM_ID, _K.UNK_ID, _K.SEP_ID, _K.PAD_ID, _K.MASK_ID,
                    _K.FIM_PRE_ID, _K.FIM_SUF_ID, _K.FIM_MID_ID, _K.FIM_PAD_ID, _K.FIM_REP_ID, _K.FIM_SEP_ID,
                    _K.PREFIX_ID, _K.SUFFIX_ID, _K.MIDDLE_ID)


def hparams_from_gguf(f: GGUFHeader) -> HParams:
    """From a GGUFHeader (header only) or a GGUFFile (a subclass); GGUFError where the file
    disagrees with itself (see the module doc).  Files of other architectures get the key
    checks only (`llamapy mem` reads them)."""
    arch = f.arch
    name = f.path.name
    known = arch in ARCH_TENSORS

    def where(fld: HeaderField) -> str:
        return f"{name}: metadata '{fld.name}' (key at byte {fld.offset})"

    def desc(k: str, v) -> str:
        """A key and its value for a message: with its byte offset, or as a default."""
        fld = f.fields.get(f"{arch}.{k}")
        return f"'{arch}.{k}' (key at byte {fld.offset}) = {v}" if fld else f"{arch}.{k} (absent, so {v})"

    def key(k: str, default=None, required: bool = False, kind: type = int, lo: float | None = None):
        full = f"{arch}.{k}"
        fld = f.fields.get(full)
        if fld is None:
            if required:
                raise GGUFError(f"{name}: {full} is missing (a required key)")
            return default
        v = fld.value
        if kind is int:
            ok = isinstance(v, int) and not isinstance(v, bool)
        else:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok:
            want = "an integer" if kind is int else "a finite number"
            raise GGUFError(f"{where(fld)} = {short_repr(v)} ({fld.type.name}) is not {want}")
        if lo is not None and v < lo:
            raise GGUFError(f"{where(fld)} = {v} is out of range (at least {lo})")
        return v

    n_embd = key("embedding_length", required=True, lo=1)
    n_head = key("attention.head_count", required=True, lo=1)
    n_head_kv = key("attention.head_count_kv", n_head, lo=1)
    if n_head % n_head_kv:
        raise GGUFError(f"{name}: metadata {desc('attention.head_count', n_head)} is not a multiple of "
                        f"{desc('attention.head_count_kv', n_head_kv)}")
    head_k = key("attention.key_length", n_embd // n_head, lo=1)
    head_v = key("attention.value_length", n_embd // n_head, lo=1)
    if head_k < 1 or head_v < 1:
        raise GGUFError(f"{name}: metadata {desc('embedding_length', n_embd)} is smaller than "
                        f"{desc('attention.head_count', n_head)}")
    n_layer = key("block_count", required=True, lo=1 if known else 0)
    if n_layer > max(len(f.tensors), 1):
        raise GGUFError(f"{name}: metadata {desc('block_count', n_layer)} is larger than the file's "
                        f"{len(f.tensors)} tensors could hold")
    n_vocab = _n_vocab(f, arch, known, key, desc)
    freq_base = float(key("rope.freq_base", 10000.0, kind=float))
    # llama_model_base::load_hparams: the factor, or the older rope.scale_linear; type none: unscaled
    scale = key("rope.scaling.factor", None, kind=float, lo=0)
    if scale is None:
        scale = key("rope.scale_linear", None, kind=float, lo=0)
    scaling_type = f.get(f"{arch}.rope.scaling.type")
    if scaling_type == "none":
        scale = None
    # llama_model_gemma2::load_arch_hparams: a window of 4096 unless the file says otherwise
    n_swa = key("attention.sliding_window", 4096 if arch == "gemma2" else 0, required=arch == "gpt-oss", lo=0)
    swa_layers: tuple[bool, ...] = ()
    freq_base_swa = freq_base
    if arch in _SWA_PERIOD and n_swa > 0:
        swa_layers = _swa_layers(f, arch, n_layer, _SWA_PERIOD[arch])
        # llama.cpp: {arch}.rope.freq_base_swa when present, else 10000 for gemma3's local
        # layers, the global base for gemma2's
        freq_base_swa = float(key("rope.freq_base_swa", 10000.0 if arch == "gemma3" else freq_base, kind=float))
    if arch == "phi3" and n_swa > 0:  # llama_model_phi3::load_arch_hparams
        logger("llama_model_loader").warning("%s: Phi SWA is currently disabled (as in llama.cpp): %s = %d is not applied", name,
                    f"{arch}.attention.sliding_window", n_swa)
        n_swa = 0
    if arch in _SWA_PERIOD:
        key("final_logit_softcapping", 0.0, kind=float)
        key("attn_logit_softcapping", 0.0, kind=float)
    n_rot = key("rope.dimension_count", head_k, lo=0)
    if n_rot > head_k or n_rot % 2:
        head = (desc("attention.key_length", head_k) if f"{arch}.attention.key_length" in f.fields else
                f"{head_k} = {desc('embedding_length', n_embd)} / {desc('attention.head_count', n_head)}")
        raise GGUFError(f"{name}: metadata {desc('rope.dimension_count', n_rot)} must be even and at most the "
                        f"head size {head}")
    n_expert, n_expert_used, n_ff_exp = _experts(f, arch, key, desc)
    n_ctx_train = key("context_length", required=True, lo=1)
    hp = HParams(
        arch=arch,
        n_ctx_train=n_ctx_train,
        n_embd=n_embd,
        n_layer=n_layer,
        n_ff=key("feed_forward_length", required=known and arch != "gpt-oss", lo=1 if known else 0) or 0,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_embd_head_k=head_k,
        n_embd_head_v=head_v,
        n_vocab=n_vocab,
        f_norm_rms_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5, kind=float, lo=0)),
        rope_freq_base=freq_base,
        rope_freq_base_swa=freq_base_swa,
        rope_freq_scale=1.0 / float(scale) if scale else 1.0,
        n_rot=n_rot,
        n_swa=n_swa,
        swa_layers=swa_layers,
        attn_soft_cap=arch == "gemma2",
        n_expert=n_expert,
        n_expert_used=n_expert_used,
        n_ff_exp=n_ff_exp,
        attn_sinks=arch == "gpt-oss",
        **_yarn(f, arch, key, scaling_type, scale),
        causal_attn=bool(f.get(f"{arch}.attention.causal", True)),
        pooling_type=key("pooling_type", -1, lo=-1),
        f_norm_eps=float(key("attention.layer_norm_epsilon", 1e-12, kind=float, lo=0)),
        n_token_types=_int_field(f, "tokenizer.ggml.token_type_count"),
        n_cls_out=len(f.get(f"{arch}.classifier.output_labels") or ()) or 1,
    )
    if known:
        check_keys(f, arch)
        check_tensors(f, hp)
        _check_vocab_keys(f)
    return hp


def _yarn(f: GGUFHeader, arch: str, key, scaling_type, scale) -> dict:
    """llama_context's YaRN values: ext_factor 1 for rope.scaling.type yarn, attn_factor
    get_mscale(factor) / (1 + 0.1 ln factor) (1 for factor > 1) times rope.scaling.attn_factor,
    beta_fast 32, beta_slow 1, n_ctx_orig rope.scaling.original_context_length or the trained
    context (arch_keys refuses yarn and attn_factor where not implemented)."""
    attn = float(key("rope.scaling.attn_factor", 1.0, kind=float))
    n_orig = key("rope.scaling.original_context_length", 0, lo=0) or key("context_length", 0)
    if scaling_type != "yarn":
        return {"yarn_attn_factor": attn, "n_ctx_orig_yarn": n_orig}
    factor = float(scale) if scale else 1.0
    mscale = 1.0 if factor <= 1.0 else 0.1 * math.log(factor) + 1.0
    return {"yarn_ext_factor": 1.0, "yarn_attn_factor": mscale / (1.0 + 0.1 * math.log(factor)) * attn,
            "n_ctx_orig_yarn": n_orig}
def _int_field(f: GGUFHeader, k: str) -> int:
    """A non-negative integer key outside {arch}.* (0 when absent)."""
    v = f.get(k, 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        fld = f.fields[k]
        raise GGUFError(f"{f.path.name}: metadata '{k}' (key at byte {fld.offset}) = {short_repr(v)} is not a count")
    return v


def _experts(f: GGUFHeader, arch: str, key, desc) -> tuple[int, int, int]:
    """(n_expert, n_expert_used, n_ff_exp) of an architecture of arch_keys.MOE_ARCHS (llama_model_base::
    load_hparams: 0 < expert_used_count <= expert_count when there are experts; qwen3moe's
    expert width expert_feed_forward_length, else n_ff / n_expert_used as llama.cpp); (0, 0, 0)
    for the others (check_keys refuses their expert keys)."""
    if arch not in MOE_ARCHS:
        return 0, 0, 0
    moe_only = arch in ("qwen3moe", "gpt-oss")  # experts in every layer
    n_expert = key("expert_count", 0, required=moe_only, lo=1 if moe_only else 0)
    if not n_expert:
        return 0, 0, 0
    n_used = key("expert_used_count", 0, lo=0)
    if not 0 < n_used <= n_expert:
        raise GGUFError(f"{f.path.name}: metadata {desc('expert_used_count', n_used)} must be in 1..{n_expert} "
                        f"({desc('expert_count', n_expert)})")
    n_ff = key("feed_forward_length", 0, lo=0)
    if arch == "llama":
        return n_expert, n_used, n_ff
    if arch == "gpt-oss":  # llama_model_openai_moe::load_arch_hparams: a required key
        return n_expert, n_used, key("expert_feed_forward_length", required=True, lo=1)
    return n_expert, n_used, key("expert_feed_forward_length", 0, lo=0) or n_ff // n_used


def _n_vocab(f: GGUFHeader, arch: str, known: bool, key, desc) -> int:
    """The vocabulary size: tokenizer.ggml.tokens' length, which {arch}.vocab_size and
    token_embd must agree with."""
    name = f.path.name
    tok = f.fields.get(_K.LIST)
    embd = f.tensors.get("token_embd.weight")
    n_tokens = None
    if tok is not None:
        if _elem_type(tok) != VT.STRING:
            raise GGUFError(f"{name}: metadata '{_K.LIST}' (key at byte {tok.offset}) is not a string array")
        n_tokens = len(tok.value)
        if n_tokens == 0:
            raise GGUFError(f"{name}: metadata '{_K.LIST}' (key at byte {tok.offset}) is empty")
    elif known:
        raise GGUFError(f"{name}: tokenizer.ggml.tokens is missing (a required key: the vocabulary)")
    vocab_size = key("vocab_size", None, lo=1)
    if vocab_size is not None and n_tokens is not None and vocab_size != n_tokens:
        raise GGUFError(f"{name}: metadata {desc('vocab_size', vocab_size)} disagrees with '{_K.LIST}' "
                        f"(key at byte {tok.offset}: {n_tokens} tokens)")
    n_vocab = vocab_size if vocab_size is not None else n_tokens
    if n_vocab is None:
        n_vocab = embd.ne[1] if embd is not None and len(embd.ne) == 2 else 0
    if known and embd is not None and len(embd.ne) == 2 and embd.ne[1] != n_vocab:
        raise GGUFError(f"{name}: vocabulary size {n_vocab} ({_K.LIST}) disagrees with the embedding: "
                        f"tensor 'token_embd.weight' (info at byte {embd.info_offset}) has ne {list(embd.ne)}, "
                        f"expected [{embd.ne[0]}, {n_vocab}] = [n_embd, n_vocab]")
    return n_vocab


def _check_vocab_keys(f: GGUFHeader) -> None:
    """The tokenizer.* keys the tokenizer reads have the types it expects."""
    name = f.path.name
    n = len(f.fields[_K.LIST].value)
    fld = f.fields.get

    def where(x: HeaderField) -> str:
        return f"{name}: metadata '{x.name}' (key at byte {x.offset})"

    model = fld(_K.MODEL)
    if model is None:
        raise GGUFError(f"{name}: tokenizer.ggml.model is missing (a required key)")
    if model.value not in ("gpt2", "llama", "bert"):
        raise GGUFError(f"{where(model)} = {short_repr(model.value)} is not supported (supported: 'gpt2' byte-level BPE, "
                        f"'llama' SentencePiece, 'bert' WordPiece)")
    pre = fld(_K.PRE)
    if pre is not None:
        if not isinstance(pre.value, str):
            raise GGUFError(f"{where(pre)} is a {pre.type.name}, expected a string")
        if model.value == "gpt2" and pre.value:
            from ..tokenizer.bpe import PRE_TYPES

            if pre.value not in PRE_TYPES:
                raise GGUFError(f"{where(pre)} = {short_repr(pre.value)} is not a pre-tokenizer llamapy knows "
                                f"(supported: {', '.join(sorted(PRE_TYPES))})")
    for k in (_K.SCORES, _K.TOKEN_TYPE):
        x = fld(k)
        if x is not None and _elem_type(x) in (None, VT.STRING, VT.ARRAY):
            raise GGUFError(f"{where(x)} is not a numeric array")
        if x is not None and len(x.value) < n:
            raise GGUFError(f"{where(x)} has {len(x.value)} entries, fewer than the {n} tokens")
    merges = fld(_K.MERGES)
    if merges is not None and _elem_type(merges) != VT.STRING:
        raise GGUFError(f"{where(merges)} is not a string array")
    for k in _SPECIAL_ID_KEYS:
        x = fld(k)
        if x is not None and (isinstance(x.value, bool) or not isinstance(x.value, int)):
            raise GGUFError(f"{where(x)} = {short_repr(x.value)} ({x.type.name}) is not a token id")
    tpl = fld(_K.CHAT_TEMPLATE)
    if tpl is not None and not isinstance(tpl.value, str):
        raise GGUFError(f"{where(tpl)} is a {tpl.type.name}, expected a string")


def _elem_type(x: HeaderField) -> VT | None:
    """The element type of an array field (large ones are ArrayRefs, small ones lists); None
    for a scalar."""
    if x.type != VT.ARRAY:
        return None
    return x.value.type if isinstance(x.value, ArrayRef) else x.elem_type
