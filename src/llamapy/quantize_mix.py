"""Which type each tensor gets in a llama-quantize mix (src/llama-quant.cpp's
tensor_allows_quantization, llama_tensor_get_type_impl and tensor_type_fallback), for the mixes
`llamapy quantize` writes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4_MOE.

- only `*weight` tensors of two or more dimensions are converted; not `*_norm.weight`, the MoE
  router `ffn_gate_inp.weight`, position embeddings or token types;
- the output matrix (`output.weight`, or `token_embd.weight` when the model ties the two) is Q8_0
  in the Q8_0 and MXFP4_MOE mixes and where its rows are not whole blocks of the mix's type,
  else Q6_K;
- MXFP4_MOE: the 3-D expert stacks (more than one expert) are MXFP4, every other matrix Q8_0;
- IQ4_NL / IQ4_XS: attn_v (and fused attn_qkv) is Q5_K when n_head / n_head_kv >= 4, ffn_down of
  the first n_layer / 8 layers is Q5_K (no imatrix), attn_output is Q5_K with exactly 8 experts;
- with exactly 8 experts (Mixtral) attn_v and attn_k are Q8_0 in every mix here;
- rows that are not whole blocks fall back: IQ4_XS -> IQ4_NL, Q6_K -> Q8_0, Q5_K -> Q5_1, a
  32-block type (or a fallback that still does not fit) -> F16.
llamapy has no Q5_K quantizer (llama.cpp's make_qkx2_quants search): a tensor that llama-quantize
makes Q5_K (after the fallback: 64 columns make it Q5_1, which is written) keeps the mix's type here, and the plan says so (TensorPlan.not_as_llamacpp) so the
CLI can warn.  No torch here.
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
WRITABLE = frozenset((*FLOAT_TYPES, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q6_K, T.IQ4_NL, T.IQ4_XS, T.MXFP4))
LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True, slots=True)
class MixHparams:
    """The model numbers llama-quantize's rules look at (llama_hparams)."""
    n_layer: int = 0
    n_expert: int = 0
    n_gqa: int = 1  # n_head / n_head_kv of layer 0


@dataclass(frozen=True, slots=True)
class TypeChoice:
    out: T  # what is written
    fell_back_from: T | None = None  # the rule's type, had the rows been whole blocks of it
    not_as_llamacpp: T | None = None  # llama-quantize's type where llamapy cannot write it (Q5_K)


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


def mix_rule(name: str, shape: tuple[int, ...], qtype: T, output_name: str, hp: MixHparams) -> T:
    """llama_tensor_get_type_impl for a quantized mix type qtype (before the fallback)."""
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
        new = T.Q5_K if qtype in IQ4_TYPES and hp.n_gqa >= 4 else qtype
        return T.Q8_0 if hp.n_expert == 8 else new
    if cat == "attn_k":
        return T.Q8_0 if hp.n_expert == 8 else qtype
    if cat == "ffn_down":
        m = LAYER.match(name)
        i_layer = int(m.group(1)) if m else 0
        return T.Q5_K if qtype in IQ4_TYPES and i_layer < hp.n_layer // 8 else qtype
    if cat == "attn_output" and hp.n_expert == 8 and qtype in IQ4_TYPES:
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
                hp: MixHparams | None = None) -> TypeChoice:
    """The type `name` (numpy-order shape [.., n_in]) is written as in qtype's mix."""
    if not allows_quantization(name, len(shape)):
        return TypeChoice(src_type)
    if qtype in FLOAT_TYPES:
        return TypeChoice(qtype)
    rule = mix_rule(name, shape, qtype, output_name, hp or MixHparams())
    out = fallback(rule, shape[-1])
    if out in WRITABLE:
        return TypeChoice(out, rule if out != rule else None)
    kept = fallback(qtype, shape[-1])  # Q5_K: the mix's own type, and say so
    return TypeChoice(kept, qtype if kept != qtype else None, out)


def hparams_of(fields: dict, arch: str) -> MixHparams:
    """MixHparams from a GGUF's metadata fields (name -> object with .value)."""
    def get(key: str, default: int) -> int:
        fld = fields.get(f"{arch}.{key}")
        if fld is None:
            return default
        v = fld.value
        return int(v[0]) if isinstance(v, (list, tuple)) else int(v)

    n_head = get("attention.head_count", 1)
    n_head_kv = get("attention.head_count_kv", n_head)
    return MixHparams(n_layer=get("block_count", 0), n_expert=get("expert_count", 0),
                      n_gqa=n_head // n_head_kv if n_head_kv > 0 else 1)
