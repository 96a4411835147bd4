"""Write a GGUF with a REAL model's shape and random weights, directly in a quant type.

For speed measurements at the sizes people run (issue "Speed at the sizes people run").
No F16 detour: each quantized tensor is random bytes in GGML's block layout, with the fp16
scale fields overwritten by small positive values so activations stay finite; decode speed
does not depend on the values. Tensors are generated and written one at a time (an 8B file
never sits in memory). The vocabulary is synthetic (the 256 GPT-2 byte tokens, then filler
tokens, then three control tokens) of the real size: only its size matters for speed.

Types: Q4_0, Q8_0 and Q4_K_M as llama-quantize makes it (llama.cpp src/llama-quant.cpp,
llama_tensor_get_type, for these dense shapes): output.weight (and token_embd.weight when
the output is tied to it) Q6_K; attn_v.weight and ffn_down.weight Q6_K in the layers where
use_more_bits(i, n_layer) holds, else Q4_K; everything else Q4_K. Q5_K only appears there
for fused attn_qkv or 8-expert attn_output, which none of these shapes has. For Q4_0 the
output (or tied token_embd) is Q6_K as well; for Q8_0 it stays Q8_0. Norms, biases and
rope_freqs are F32.  MoE (qwen3-30b-a3b): the experts' ffn_down_exps follow ffn_down's rule,
the router ffn_gate_inp and the QK norms are F32 (n_expert 128, not 8: no Mixtral bumps).

  python benchmarks/shapes.py llama-3.2-1b Q4_K_M              # -> ~/.cache/llamapy/shapes/
  python benchmarks/shapes.py llama-3.1-8b Q4_K_M --layers 8   # reduced depth
  python benchmarks/shapes.py qwen3-30b-a3b Q4_K_M --layers 8  # the MoE, 8 of its 48 layers
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

QT = gguf.GGMLQuantizationType
SHAPES_DIR = Path.home() / ".cache" / "llamapy" / "shapes"


@dataclass(frozen=True)
class Shape:
    """One real model's hyperparameters (llama.cpp's names)."""
    arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    tied: bool
    rope_freqs: bool = False
    qkv_bias: bool = False
    rope_base: float = 10000.0
    n_ctx_train: int = 131072
    moe_note: str = ""
    head_dim: int = 0  # 0: n_embd / n_head; else written as key_length / value_length
    qk_norm: bool = False  # qwen3: attn_q_norm / attn_k_norm [head_dim]
    n_expert: int = 0  # MoE: router ffn_gate_inp (F32) and 3-D ffn_{gate,up,down}_exps
    n_expert_used: int = 0
    n_ff_exp: int = 0  # expert_feed_forward_length

    @property
    def d(self) -> int:
        return self.head_dim or self.n_embd // self.n_head


SHAPES: dict[str, Shape] = {
    "llama-3.2-1b": Shape("llama", 2048, 16, 32, 8, 8192, 128256, tied=True, rope_freqs=True, rope_base=500000.0),
    "llama-3.1-8b": Shape("llama", 4096, 32, 32, 8, 14336, 128256, tied=False, rope_freqs=True, rope_base=500000.0),
    "qwen2.5-7b": Shape("qwen2", 3584, 28, 28, 4, 18944, 152064, tied=False, qkv_bias=True, rope_base=1000000.0,
                        n_ctx_train=32768),
    # Qwen3-30B-A3B: 48 layers, 32/4 heads of 128 with QK-norm, 128 experts of 768, 8 used
    # (its config.json / the published GGUF's keys); dense feed_forward_length 6144 is unused.
    "qwen3-30b-a3b": Shape("qwen3moe", 2048, 48, 32, 4, 6144, 151936, tied=False, rope_base=1000000.0,
                           n_ctx_train=40960, head_dim=128, qk_norm=True, n_expert=128, n_expert_used=8,
                           n_ff_exp=768),
}

FTYPES = {"Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M, "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
          "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}

# byte offsets of the fp16 scale fields in one block, and the largest |sub-scale * q| in a block
SCALES: dict[QT, tuple[tuple[int, ...], int]] = {
    QT.Q4_0: ((0,), 8), QT.Q8_0: ((0,), 128), QT.Q4_K: ((0, 2), 945),
    QT.Q5_K: ((0, 2), 1953), QT.Q6_K: ((208,), 4064),
}


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama-quant.cpp's use_more_bits."""
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def tensor_type(name: str, il: int, s: Shape, ftype: str) -> QT:
    """The type llama-quantize gives a 2-D weight `name` of layer il (-1: none) for ftype."""
    base = {"Q4_K_M": QT.Q4_K, "Q4_0": QT.Q4_0, "Q8_0": QT.Q8_0}[ftype]
    if name == "output.weight" or (s.tied and name == "token_embd.weight"):
        return base if base == QT.Q8_0 else QT.Q6_K
    if ftype == "Q4_K_M" and (name.endswith("attn_v.weight") or "ffn_down" in name):
        return QT.Q6_K if use_more_bits(il, s.n_layer) else QT.Q4_K
    return base


def random_blocks(rows: int, cols: int, qtype: QT, rng: np.random.Generator, top: float = 0.05) -> np.ndarray:
    """uint8 [rows, row bytes]: random blocks of qtype whose fp16 scales keep |w| <= about top
    (an expert stack [n_expert, rows, cols] is n_expert * rows rows)."""
    be, bb = gguf.GGML_QUANT_SIZES[qtype]
    n = rows * cols // be
    b = np.frombuffer(rng.bytes(n * bb), dtype=np.uint8).reshape(n, bb).copy()
    offsets, biggest = SCALES[qtype]
    for off in offsets:
        h = (rng.uniform(0.2, 1.0, size=n) * top / biggest).astype(np.float16)
        b[:, off:off + 2] = h.view(np.uint8).reshape(n, 2)
    return b.reshape(rows, -1)


def synthetic_vocab(n_vocab: int) -> tuple[list[str], list[int]]:
    """n_vocab tokens: the 256 GPT-2 byte tokens, "Ġt" (the one merge, as llama.cpp wants a
    merges list), filler, three control tokens last."""
    from llamapy.tokenizer import _byte_decoder

    by_byte = {b: ch for ch, b in _byte_decoder().items()}
    tokens = [by_byte[b] for b in range(256)]
    tokens += ["Ġt"] + [f"tok{i}" for i in range(n_vocab - 256 - 4)]
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [int(gguf.TokenType.NORMAL)] * (n_vocab - 3) + [int(gguf.TokenType.CONTROL)] * 3
    return tokens, types


def tensor_plan(s: Shape, ftype: str) -> list[tuple[str, tuple[int, ...], QT | None]]:
    """(name, numpy shape [rows, cols], [n_expert, rows, cols] or [n], type; None: F32) in llama.cpp's order."""
    d = s.d
    plan: list[tuple[str, tuple[int, ...], QT | None]] = []

    def w(name: str, rows: int, cols: int, il: int = -1, n_expert: int = 0) -> None:
        plan.append((name, (n_expert, rows, cols) if n_expert else (rows, cols), tensor_type(name, il, s, ftype)))

    w("token_embd.weight", s.n_vocab, s.n_embd)
    plan.append(("output_norm.weight", (s.n_embd,), None))
    if not s.tied:
        w("output.weight", s.n_vocab, s.n_embd)
    if s.rope_freqs:
        plan.append(("rope_freqs.weight", (d // 2,), None))
    for il in range(s.n_layer):
        p = f"blk.{il}."
        plan.append((p + "attn_norm.weight", (s.n_embd,), None))
        w(p + "attn_q.weight", s.n_head * d, s.n_embd, il)
        w(p + "attn_k.weight", s.n_head_kv * d, s.n_embd, il)
        w(p + "attn_v.weight", s.n_head_kv * d, s.n_embd, il)
        if s.qkv_bias:
            plan += [(p + "attn_q.bias", (s.n_head * d,), None), (p + "attn_k.bias", (s.n_head_kv * d,), None),
                     (p + "attn_v.bias", (s.n_head_kv * d,), None)]
        w(p + "attn_output.weight", s.n_embd, s.n_head * d, il)
        if s.qk_norm:
            plan += [(p + "attn_q_norm.weight", (d,), None), (p + "attn_k_norm.weight", (d,), None)]
        plan.append((p + "ffn_norm.weight", (s.n_embd,), None))
        if s.n_expert:  # the router stays F32 (llama-quantize never quantizes ffn_gate_inp)
            plan.append((p + "ffn_gate_inp.weight", (s.n_expert, s.n_embd), None))
            w(p + "ffn_gate_exps.weight", s.n_ff_exp, s.n_embd, il, s.n_expert)
            w(p + "ffn_up_exps.weight", s.n_ff_exp, s.n_embd, il, s.n_expert)
            w(p + "ffn_down_exps.weight", s.n_embd, s.n_ff_exp, il, s.n_expert)
            continue
        w(p + "ffn_gate.weight", s.n_ff, s.n_embd, il)
        w(p + "ffn_up.weight", s.n_ff, s.n_embd, il)
        w(p + "ffn_down.weight", s.n_embd, s.n_ff, il)
    return plan


def write_shape(name: str, ftype: str, path: Path, n_layer: int | None = None, seed: int = 0) -> Path:
    """Write shape `name` in `ftype` to path (n_layer: reduced depth); tensors streamed one at a time."""
    s = SHAPES[name]
    if s.moe_note:
        raise NotImplementedError(f"{name}: {s.moe_note}")
    if n_layer is not None:
        s = Shape(**{**s.__dict__, "n_layer": n_layer})
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    wr = gguf.GGUFWriter(str(path), s.arch)
    wr.add_name(f"{name} shape, random weights")
    wr.add_context_length(s.n_ctx_train)
    wr.add_embedding_length(s.n_embd)
    wr.add_block_count(s.n_layer)
    wr.add_feed_forward_length(s.n_ff)
    wr.add_head_count(s.n_head)
    wr.add_head_count_kv(s.n_head_kv)
    wr.add_rope_freq_base(s.rope_base)
    wr.add_layer_norm_rms_eps(1e-5 if s.arch == "llama" else 1e-6)
    wr.add_rope_dimension_count(s.d)
    if s.head_dim:
        wr.add_key_length(s.d)
        wr.add_value_length(s.d)
    if s.n_expert:
        wr.add_expert_count(s.n_expert)
        wr.add_expert_used_count(s.n_expert_used)
        wr.add_expert_feed_forward_length(s.n_ff_exp)
    wr.add_vocab_size(s.n_vocab)
    wr.add_file_type(FTYPES[ftype])
    tokens, types = synthetic_vocab(s.n_vocab)
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("default")
    wr.add_token_list(tokens)
    wr.add_token_types(types)
    wr.add_token_merges(["Ġ t"])
    wr.add_bos_token_id(s.n_vocab - 3)
    wr.add_eos_token_id(s.n_vocab - 1)
    wr.add_add_bos_token(False)
    plan = tensor_plan(s, ftype)
    for tname, shape, qt in plan:
        if qt is None:
            wr.add_tensor_info(tname, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        else:
            be, bb = gguf.GGML_QUANT_SIZES[qt]
            rb = shape[-1] // be * bb
            bshape = (*shape[:-1], rb)
            wr.add_tensor_info(tname, bshape, np.dtype(np.uint8), int(np.prod(bshape)), raw_dtype=qt)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_ti_data_to_file()
    for tname, shape, qt in plan:
        if qt is None and tname.endswith("ffn_gate_inp.weight"):  # a random router: tokens spread over experts
            wr.write_tensor_data((rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32))
        elif qt is None:
            fill = 0.0 if tname.endswith(".bias") else 1.0
            wr.write_tensor_data(np.full(shape, fill, dtype=np.float32))
        else:
            rows = int(np.prod(shape[:-1]))
            wr.write_tensor_data(random_blocks(rows, shape[-1], qt, rng).reshape(*shape[:-1], -1))
    wr.close()
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("type", choices=sorted(FTYPES))
    ap.add_argument("--layers", type=int, default=None, help="reduced depth (default: the real n_layer)")
    ap.add_argument("-o", "--output", type=Path, default=None, help=f"default: {SHAPES_DIR}/<shape>[-Lnn]-<type>.gguf")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    tag = a.shape + (f"-L{a.layers}" if a.layers else "")
    out = a.output or SHAPES_DIR / f"{tag}-{a.type}.gguf"
    t0 = time.perf_counter()
    try:
        write_shape(a.shape, a.type, out, a.layers, a.seed)
    except NotImplementedError as e:
        print(f"shapes: {e}", file=sys.stderr)
        return 2
    print(f"{out}  {out.stat().st_size / 2**30:.2f} GiB  {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
