"""The tensors each architecture Model.load builds reads (llama.cpp's load_arch_tensors), and
the header check of a file against them: every required tensor present with the shape the
hyperparameters give, every optional one with its shape where present, and no tensor the
architecture does not read.  llama.cpp refuses a file with tensors it did not create (`wrong
number of tensors; expected N, got M`); here the message names them, so a file whose extra
tensors would change the computation (an MoE router, an output bias, a fused attn_qkv) is
never run with them silently ignored.

Shapes are in ggml ne order, as names of HParams fields ("n_head*k": n_head * n_embd_head_k).
Torch-free: `llamapy mem` runs it on a header."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..gguf.header import GGUFError, GGUFHeader

_LLAMA_LAYER = {
    "attn_norm.weight": ("n_embd",), "attn_q.weight": ("n_embd", "n_head*k"), "attn_k.weight": ("n_embd", "n_head_kv*k"),
    "attn_v.weight": ("n_embd", "n_head_kv*v"), "attn_output.weight": ("n_head*v", "n_embd"),
    "ffn_norm.weight": ("n_embd",), "ffn_gate.weight": ("n_embd", "n_ff"), "ffn_up.weight": ("n_embd", "n_ff"),
    "ffn_down.weight": ("n_ff", "n_embd"),
}
# llama_model_base::create_tensor_qkv: each of Q, K, V may have a bias (Qwen2 has all three)
_QKV_BIAS = {"attn_q.bias": ("n_head*k",), "attn_k.bias": ("n_head_kv*k",), "attn_v.bias": ("n_head_kv*v",)}
_QK_NORM = {"attn_q_norm.weight": ("n_embd_head_k",), "attn_k_norm.weight": ("n_embd_head_k",)}
_GEMMA_POST_NORMS = {"post_attention_norm.weight": ("n_embd",), "post_ffw_norm.weight": ("n_embd",)}
# build_moe_ffn's tensors (model/moe.py): the router and the experts' 3-D stacks
_MOE_FFN = {"ffn_norm.weight": ("n_embd",), "ffn_gate_inp.weight": ("n_embd", "n_expert"),
            "ffn_gate_exps.weight": ("n_embd", "n_ff_exp", "n_expert"),
            "ffn_up_exps.weight": ("n_embd", "n_ff_exp", "n_expert"),
            "ffn_down_exps.weight": ("n_ff_exp", "n_embd", "n_expert")}
_LLAMA_ATTN = {k: v for k, v in _LLAMA_LAYER.items() if not k.startswith("ffn_")}
# llama_model_openai_moe::load_arch_tensors: the attention's output bias and sinks, the MoE FFN
# after post_attention_norm with biases on the router and every expert; Q/K/V biases optional
_GPT_OSS_LAYER = {**_LLAMA_ATTN, "post_attention_norm.weight": ("n_embd",), "attn_output.bias": ("n_embd",),
                  "attn_sinks.weight": ("n_head",),
                  **{k: v for k, v in _MOE_FFN.items() if k != "ffn_norm.weight"},
                  "ffn_gate_inp.bias": ("n_expert",), "ffn_gate_exps.bias": ("n_ff_exp", "n_expert"),
                  "ffn_up_exps.bias": ("n_ff_exp", "n_expert"), "ffn_down_exps.bias": ("n_embd", "n_expert")}
_GLOBAL = {"token_embd.weight": ("n_embd", "n_vocab"), "output_norm.weight": ("n_embd",)}
_OUTPUT = {"output.weight": ("n_embd", "n_vocab")}  # absent: the output is tied to token_embd
# llama_model_bert::load_arch_tensors: learned positions, the embedding LayerNorm, post-norms
# with biases, a GELU FFN; token_types and the classifier head (cls, cls.output) optional
_BERT_GLOBAL = {"token_embd.weight": ("n_embd", "n_vocab"), "position_embd.weight": ("n_embd", "n_ctx_train"),
                "token_embd_norm.weight": ("n_embd",), "token_embd_norm.bias": ("n_embd",)}
_BERT_OPTIONAL = {"token_types.weight": ("n_embd", "n_token_types"), "cls.weight": ("n_embd", "n_embd"),
                  "cls.bias": ("n_embd",), "cls.output.weight": ("n_embd", "n_cls_out"), "cls.output.bias": ("n_cls_out",)}
_BERT_LAYER = {"attn_q.weight": ("n_embd", "n_head*k"), "attn_k.weight": ("n_embd", "n_head_kv*k"),
               "attn_v.weight": ("n_embd", "n_head_kv*v"), "attn_output.weight": ("n_head*v", "n_embd"),
               "attn_output_norm.weight": ("n_embd",), "attn_output_norm.bias": ("n_embd",),
               "ffn_up.weight": ("n_embd", "n_ff"), "ffn_down.weight": ("n_ff", "n_embd"),
               "layer_output_norm.weight": ("n_embd",), "layer_output_norm.bias": ("n_embd",)}
_BERT_LAYER_OPTIONAL = {**_QKV_BIAS, "attn_output.bias": ("n_embd",), "ffn_up.bias": ("n_ff",),
                        "ffn_down.bias": ("n_embd",)}
# llama_model_nomic_bert::load_arch_tensors: no learned positions (RoPE), Q|K|V fused, a SwiGLU
# FFN (ffn_gate, ffn_up, ffn_down; the graph adds no FFN biases, so a file with them is refused)
_NOMIC_GLOBAL = {k: v for k, v in _BERT_GLOBAL.items() if k != "position_embd.weight"}
_NOMIC_LAYER = {**{k: v for k, v in _BERT_LAYER.items() if not k.startswith("attn_") or k.startswith("attn_output")},
                "attn_qkv.weight": ("n_embd", "n_qkv"), "ffn_gate.weight": ("n_embd", "n_ff")}
_NOMIC_LAYER_OPTIONAL = {"attn_qkv.bias": ("n_qkv",), "attn_output.bias": ("n_embd",)}


@dataclass(frozen=True, slots=True)
class ArchTensors:
    """One architecture's tensors: per layer (blk.N.<name>) required and optional, and the
    global ones besides token_embd and output_norm that it reads when present."""

    layer: dict[str, tuple[str, ...]]
    layer_optional: dict[str, tuple[str, ...]] = field(default_factory=dict)
    optional: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(_OUTPUT))
    required: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(_GLOBAL))  # the global ones


ARCH_TENSORS: dict[str, ArchTensors] = {
    # rope_freqs: Llama 3.1+'s per-dimension-pair RoPE frequency factors (model/rope.py)
    "llama": ArchTensors(_LLAMA_LAYER, _QKV_BIAS, {**_OUTPUT, "rope_freqs.weight": ("n_rot/2",)}),
    "qwen2": ArchTensors(_LLAMA_LAYER, _QKV_BIAS),
    # cls.output: Qwen3-Reranker's "yes"/"no" rows of lm_head (rank pooling, archs/qwen3.py)
    "qwen3": ArchTensors({**_LLAMA_LAYER, **_QK_NORM}, _QKV_BIAS, {**_OUTPUT, "cls.output.weight": ("n_embd", "n_cls_out")}),
    # llama_model_qwen3moe::load_arch_tensors: Qwen 3's attention, the MoE FFN in every layer
    "qwen3moe": ArchTensors({**_LLAMA_ATTN, **_QK_NORM, **_MOE_FFN}),
    "gemma3": ArchTensors({**_LLAMA_LAYER, **_QK_NORM, **_GEMMA_POST_NORMS}),
    # llama_model_gemma2::load_arch_tensors: no Q/K norms, output always token_embd (no output.weight)
    "gemma2": ArchTensors({**_LLAMA_LAYER, **_GEMMA_POST_NORMS}, optional={}),
    # llama_model_phi3::load_arch_tensors: Q|K|V fused, gate|up fused in ffn_up (separate Q/K/V,
    # which llama.cpp also reads, are refused); LongRoPE's rope_factors_long/short where present
    "phi3": ArchTensors({"attn_norm.weight": ("n_embd",), "attn_qkv.weight": ("n_embd", "n_qkv"),
                         "attn_output.weight": ("n_head*v", "n_embd"), "ffn_norm.weight": ("n_embd",),
                         "ffn_up.weight": ("n_embd", "2*n_ff"), "ffn_down.weight": ("n_ff", "n_embd")},
                        optional={**_OUTPUT, "rope_factors_long.weight": ("n_rot/2",),
                                  "rope_factors_short.weight": ("n_rot/2",)}),
    # llama_model_openai_moe: output.weight required (never tied)
    "gpt-oss": ArchTensors(_GPT_OSS_LAYER, _QKV_BIAS, optional={}, required={**_GLOBAL, **_OUTPUT}),
    "bert": ArchTensors(_BERT_LAYER, _BERT_LAYER_OPTIONAL, _BERT_OPTIONAL, _BERT_GLOBAL),
    "nomic-bert": ArchTensors(_NOMIC_LAYER, _NOMIC_LAYER_OPTIONAL, _BERT_OPTIONAL, _NOMIC_GLOBAL),
}


# with {arch}.expert_count > 0 (llama_model_llama::load_arch_tensors: Mixtral's layout)
MOE_ARCH_TENSORS: dict[str, ArchTensors] = {
    "llama": ArchTensors({**_LLAMA_ATTN, **_MOE_FFN}, _QKV_BIAS, {**_OUTPUT, "rope_freqs.weight": ("n_rot/2",)}),
}


def _dims(hp) -> dict[str, int]:
    return {"n_embd": hp.n_embd, "n_vocab": hp.n_vocab, "n_ff": hp.n_ff, "n_embd_head_k": hp.n_embd_head_k,
            "n_head*k": hp.n_head * hp.n_embd_head_k, "n_head*v": hp.n_head * hp.n_embd_head_v,
            "n_head_kv*k": hp.n_head_kv * hp.n_embd_head_k, "n_head_kv*v": hp.n_head_kv * hp.n_embd_head_v,
            "n_rot/2": hp.n_rot // 2, "2*n_ff": 2 * hp.n_ff, "n_expert": hp.n_expert, "n_head": hp.n_head, "n_ff_exp": hp.n_ff_exp,
            "n_qkv": (hp.n_head + hp.n_head_kv) * hp.n_embd_head_k + hp.n_head_kv * hp.n_embd_head_v,
            "n_ctx_train": hp.n_ctx_train, "n_token_types": hp.n_token_types, "n_cls_out": hp.n_cls_out}


def _tables(hp, optional: bool) -> dict[str, tuple[str, ...]]:
    """Tensor name -> dimension names: the required tensors, or (optional) the optional ones."""
    a = MOE_ARCH_TENSORS[hp.arch] if hp.n_expert and hp.arch in MOE_ARCH_TENSORS else ARCH_TENSORS[hp.arch]
    glob, layer = (a.optional, a.layer_optional) if optional else (a.required, a.layer)
    out = dict(glob)
    for il in range(hp.n_layer):
        out.update({f"blk.{il}.{t}": ds for t, ds in layer.items()})
    return out


def expected_tensors(hp) -> dict[str, tuple[int, ...]]:
    """Tensor name -> ne (ggml order) of every tensor the architecture requires (the optional
    ones, e.g. output.weight, are not among them)."""
    dims = _dims(hp)
    return {t: tuple(dims[d] for d in ds) for t, ds in _tables(hp, False).items()}


def check_tensors(f: GGUFHeader, hp) -> None:
    """Every tensor the architecture requires is present, each one it reads has the shape hp
    gives it, and the file has no other tensor (GGUFError naming them all)."""
    name = f.path.name
    dims = _dims(hp)
    want = _tables(hp, False)
    optional = _tables(hp, True)
    for t, ds in [*want.items(), *((t, ds) for t, ds in optional.items() if t in f.tensors)]:
        info = f.tensors.get(t)
        if info is None:
            raise GGUFError(f"{name}: tensor '{t}' is missing (is this GGUF complete?)")
        ne = tuple(dims[d] for d in ds)
        if info.ne != ne:
            raise GGUFError(f"{name}: tensor '{t}' (info at byte {info.info_offset}) has ne {list(info.ne)}, expected "
                            f"{list(ne)} = [{', '.join(ds)}] from the hyperparameters")
    unused = [t for t in f.tensors if t not in want and t not in optional]
    if unused:
        n_used = len(f.tensors) - len(unused)
        raise GGUFError(f"{name}: the '{hp.arch}' architecture does not read {len(unused)} of the file's tensors "
                        f"(refused rather than ignored): {name_list(unused)} (llama.cpp: wrong number of tensors; "
                        f"expected {n_used}, got {len(f.tensors)})")


def name_list(names: list[str]) -> str:
    """Every name, the per-layer ones grouped by their suffix with their layers as ranges:
    'rope_freqs.weight', 'blk.{0-3,5}.ffn_gate_inp.weight'."""
    layers: dict[str, list[int]] = {}
    out: list[tuple[bool, str]] = []  # (per-layer, name or suffix) in first-seen order
    for t in names:
        parts = t.split(".", 2)
        if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
            if parts[2] not in layers:
                out.append((True, parts[2]))
            layers.setdefault(parts[2], []).append(int(parts[1]))
        else:
            out.append((False, t))

    def one(per_layer: bool, t: str) -> str:
        if not per_layer:
            return f"'{t}'"
        ids = sorted(layers[t])
        return f"'blk.{ids[0]}.{t}'" if len(ids) == 1 else f"'blk.{{{_ranges(ids)}}}.{t}' ({len(ids)} tensors)"

    return ", ".join(one(*x) for x in out)


def _ranges(xs: list[int]) -> str:
    """[0, 1, 2, 3, 5] -> '0-3,5'."""
    out, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(out)
