"""Which type each tensor gets in a llama-quantize mix (src/llama-quant.cpp's
tensor_allows_quantization, llama_tensor_get_type_impl and tensor_type_fallback), for the mixes
`llamapy quantize` writes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4_MOE,
Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M.

- only `*weight` tensors of two or more dimensions are converted; not `*_norm.weight`, the MoE
  router `ffn_gate_inp.weight`, position embeddings or token types;
- the output matrix (`output.weight`, or `token_embd.weight` when the model ties the two) is Q8_0
  in the Q8_0 and MXFP4_MOE mixes and where its rows are not whole blocks of the mix's type,
  else Q6_K;
- MXFP4_MOE: the 3-D expert stacks (more than one expert) are MXFP4, every other matrix Q8_0;
- attn_v (and fused attn_qkv, attn_kv_b), i-th of n in llama-quantize's order (by layer): Q5_K in
  IQ4_NL / IQ4_XS when n_head / n_head_kv >= 4; Q6_K in Q4_K_M / Q5_K_M where use_more_bits(i, n);
  Q5_K in Q4_K_S for i < 4;
- ffn_down of layer i of n_layer: Q5_K in IQ4_NL / IQ4_XS (no imatrix) and Q4_K_S for
  i < n_layer / 8; Q6_K in Q4_K_M / Q5_K_M where use_more_bits(i, n_layer);
- attn_output is Q5_K with exactly 8 experts in IQ4_NL, IQ4_XS, Q4_K_S, Q4_K_M;
- with exactly 8 experts (Mixtral) attn_v and attn_k are Q8_0 in every mix here;
- rows that are not whole blocks fall back: IQ4_XS -> IQ4_NL, Q6_K -> Q8_0, Q5_K -> Q5_1,
  Q4_K -> Q5_0, a 32-block type (or a fallback that still does not fit) -> F16.
use_more_bits(i, n) = i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2.  Not followed: the 70B-only
attn_v bump (llama.cpp's model-size type, which no model llamapy runs has) and Falcon's rules.
No torch here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import gguf

T = gguf.GGMLQuantizationType
FLOAT_TYPES = (T.F32, T.F16, T.BF16)
KEEP_NAMES = ("position_embd.weight", "token_types.weight")  # llama-quantize never quantizes these
IQ4_TYPES = (T.IQ4_NL, T.IQ4_XS)
FALLBACK = {T.IQ4_XS: T.IQ4_NL, T.Q6_K: T.Q8_0, T.Q5_K: T.Q5_1, T.Q4_K: T.Q5_0}  # tensor_type_fallback
WRITABLE = frozenset((*FLOAT_TYPES, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL,
                      T.IQ4_XS, T.MXFP4))
K_MIXES = {"Q4_K_S": T.Q4_K, "Q4_K_M": T.Q4_K, "Q5_K_S": T.Q5_K, "Q5_K_M": T.Q5_K}  # name -> default type
LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True, slots=True)
class MixHparams:
    """The model numbers llama-quantize's rules look at (llama_hparams)."""
    n_layer: int = 0
    n_expert: int = 0
    n_gqa: int = 1  # n_head / n_head_kv of layer 0
    attn_v: tuple[str, ...] = ()  # the attn_v-category tensors in llama-quantize's order (its i_attention_wv)
    ffn_down: tuple[str, ...] = ()  # the ffn_down-category tensors, same order (its i_ffn_down)


@dataclass(frozen=True, slots=True)
class TypeChoice:
    out: T  # what is written
    fell_back_from: T | None = None  # the rule's type, had the rows been whole blocks of it


def block_size(t: T) -> int:
    return gguf.GGML_QUANT_SIZES[t][0]


def allows_quantization(name: str, n_dims: int) -> bool:
    """llama-quantize's tensor_allows_quantization for the architectures llamapy runs."""
    return (n_dims >= 2 and name.endswith("weight") and "_norm.weight" not in name
            and "ffn_gate_inp.weight" not in name and not name.endswith(KEEP_NAMES))


def output_matrix_name(names: set[str]) -> str:
    """The tensor llama-quantize treats as the output matrix: output.weight, or the token
    embeddings when the model ties them (no output.weight)."""
    return "output.weight" if "output.weight" in names else "token_embd.weight"


def category(name: str, output_name: str) -> str:
    """tensor_get_category: output, token_embd, attn_qkv, attn_kv_b, attn_v, attn_k, attn_q,
    attn_output, ffn_up, ffn_gate, ffn_down or other; the tied token_embd counts as output."""
    if name == output_name or name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for cat in ("attn_qkv", "attn_kv_b", "attn_v", "attn_k", "attn_q", "attn_output"):
        if f"{cat}.weight" in name:
            return cat
    for cat in ("ffn_up", "ffn_gate", "ffn_down"):
        if cat in name:
            return cat
    return "other"


def use_more_bits(i: int, n: int) -> bool:
    """llama-quantize's use_more_bits(i_layer, n_layers) (C integer division)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def layer_order(names: list[str]) -> list[str]:
    """names in llama-quantize's order (llama_model_loader's weight_name_comparer: by the blk.N
    layer, -1 for none, then by name)."""
    def key(n: str) -> tuple[int, str]:
        m = LAYER.match(n)
        return (int(m.group(1)) if m else -1, n)
    return sorted(names, key=key)


def _ffn_down_layer(name: str, hp: MixHparams) -> int:
    """layer_info: the blk.N of the name with more than one expert, else the tensor's place among
    the ffn_down tensors (qs.i_ffn_down)."""
    m = LAYER.match(name)
    if hp.n_expert > 1 or name not in hp.ffn_down:
        return int(m.group(1)) if m else 0
    return hp.ffn_down.index(name)


def mix_rule(name: str, shape: tuple[int, ...], qtype: T, output_name: str, hp: MixHparams,
             mix: str = "") -> T:
    """llama_tensor_get_type_impl for the mix named `mix` (default qtype's name) whose default
    type is qtype, before the fallback."""
    mix = mix or qtype.name
    cat, n_in = category(name, output_name), shape[-1]
    if cat == "output":
        if qtype == T.MXFP4 or n_in % block_size(qtype) != 0 or qtype == T.Q8_0:
            return T.Q8_0
        return T.Q6_K
    if qtype == T.MXFP4:  # MXFP4_MOE: experts MXFP4, the rest Q8_0
        return T.MXFP4 if len(shape) >= 3 and shape[-3] > 1 else T.Q8_0
    if cat == "token_embd":
        return qtype
    if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
        i = hp.attn_v.index(name) if name in hp.attn_v else 0
        new = qtype
        if qtype in IQ4_TYPES and hp.n_gqa >= 4:
            new = T.Q5_K
        elif mix in ("Q4_K_M", "Q5_K_M") and use_more_bits(i, len(hp.attn_v)):
            new = T.Q6_K
        elif mix == "Q4_K_S" and i < 4:
            new = T.Q5_K
        return T.Q8_0 if hp.n_expert == 8 else new
    if cat == "attn_k":
        return T.Q8_0 if hp.n_expert == 8 else qtype
    if cat == "ffn_down":
        i, n = _ffn_down_layer(name, hp), hp.n_layer
        if mix == "Q4_K_M":
            return T.Q6_K if use_more_bits(i, n) else qtype
        if qtype in IQ4_TYPES and i < n // 8:
            return T.Q5_K
        if mix == "Q5_K_M" and use_more_bits(i, n):
            return T.Q6_K
        if mix == "Q4_K_S" and i < n // 8:
            return T.Q5_K
        return qtype
    if cat == "attn_output" and hp.n_expert == 8 and (qtype in IQ4_TYPES or mix in ("Q4_K_S", "Q4_K_M")):
        return T.Q5_K
    return qtype


def fallback(t: T, n_in: int) -> T:
    """tensor_type_fallback: t itself when n_in is whole blocks of it, else its smaller-block
    relative, else F16."""
    if n_in % block_size(t) == 0:
        return t
    new = FALLBACK.get(t, t)
    return new if n_in % block_size(new) == 0 else T.F16


def choose_type(name: str, shape: tuple[int, ...], src_type: T, qtype: T, output_name: str,
                hp: MixHparams | None = None, mix: str = "") -> TypeChoice:
    """The type `name` (numpy-order shape [.., n_in]) is written as in the mix `mix` (default
    qtype's name) whose default type is qtype."""
    if not allows_quantization(name, len(shape)):
        return TypeChoice(src_type)
    if qtype in FLOAT_TYPES:
        return TypeChoice(qtype)
    rule = mix_rule(name, shape, qtype, output_name, hp or MixHparams(), mix)
    out = fallback(rule, shape[-1])
    assert out in WRITABLE, out  # every rule above names a type quantize writes
    return TypeChoice(out, rule if out != rule else None)


def hparams_of(fields: dict, arch: str, names: list[str] | None = None) -> MixHparams:
    """MixHparams from a GGUF's metadata fields (name -> object with .value) and its tensor
    names (for the attn_v / ffn_down counters)."""
    def get(key: str, default: int) -> int:
        fld = fields.get(f"{arch}.{key}")
        if fld is None:
            return default
        v = fld.value
        return int(v[0]) if isinstance(v, (list, tuple)) else int(v)

    n_head = get("attention.head_count", 1)
    n_head_kv = get("attention.head_count_kv", n_head)
    ordered = layer_order(list(names or ()))
    out_name = output_matrix_name(set(ordered))
    cats = {n: category(n, out_name) for n in ordered}
    return MixHparams(n_layer=get("block_count", 0), n_expert=get("expert_count", 0),
                      n_gqa=n_head // n_head_kv if n_head_kv > 0 else 1,
                      attn_v=tuple(n for n in ordered if cats[n] in ("attn_v", "attn_qkv", "attn_kv_b")),
                      ffn_down=tuple(n for n in ordered if cats[n] == "ffn_down"))
