"""LoRA adapters from GGUF files (llama.cpp's llama_adapter_lora_init: src/llama-adapter.cpp).

A file convert_lora_to_gguf.py writes has `general.type = adapter`, `adapter.type = lora`,
`adapter.lora.alpha` (0 or absent: no alpha) and the same `general.architecture` as its base
model; each adapted base tensor W ([n_out, n_in], ggml ne [n_in, n_out]) has a pair
`W.lora_a` (ggml ne [n_in, r]: torch [r, n_in]) and `W.lora_b` (ne [r, n_out]: torch [n_out, r]).
`*_norm.weight` tensors are skipped, as llama.cpp does; anything else is refused.  The product
becomes W·x + s·B·(A·x) with s = scale·alpha/r when alpha != 0, else scale
(llama_adapter_lora_weight::get_scale); the base weights are never touched (model/lora_apply.py
adds the delta beside them).  Token-embedding adapters (A and B flipped, llm_build_inp_embd) are
refused here: llamapy applies adapters to products only."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..gguf.header import GGUFError
from ..gguf.quants import DEQUANTIZE_TYPES, dequantize
from ..gguf.reader import GGUFFile
from ..log import logger


@dataclass(slots=True)
class LoraWeight:
    """One adapted tensor's pair, float32: a [r, n_in], b [n_out, r]."""

    a: torch.Tensor  # [r, n_in]
    b: torch.Tensor  # [n_out, r]

    @property
    def rank(self) -> int:
        return self.b.shape[1]

    def factor(self, alpha: float) -> float:
        """alpha / r where the adapter has an alpha, else 1 (the user's scale multiplies it)."""
        return alpha / self.rank if alpha else 1.0


@dataclass(slots=True)
class LoraAdapter:
    """A loaded adapter: its path (as given), alpha, and the pairs by base tensor name."""

    path: str
    alpha: float
    weights: dict[str, LoraWeight] = field(default_factory=dict)

    @property
    def n_bytes(self) -> int:
        return sum(w.a.numel() * 4 + w.b.numel() * 4 for w in self.weights.values())


def _str_key(f: GGUFFile, key: str) -> str:
    v = f.get(key, "")
    return v if isinstance(v, str) else str(v)


def load_lora(path: str | Path, base: GGUFFile, device: torch.device | str = "cpu") -> LoraAdapter:
    """Read and validate the adapter at `path` against the base model's file `base`
    (architecture, every pair's base tensor and shapes).  Raises GGUFError naming the file,
    the tensor and the numbers; nothing is changed by a refused adapter."""
    p = Path(path)
    if not p.is_file():
        raise GGUFError(f"--lora {path}: no such file")
    f = GGUFFile(p)
    where = f"--lora {path}"
    gtype = _str_key(f, "general.type")
    if gtype != "adapter":
        raise GGUFError(f"{where}: expect general.type to be 'adapter', but got: '{gtype}'")
    arch = _str_key(f, "general.architecture")
    if arch != base.arch:
        raise GGUFError(f"{where}: model arch and LoRA arch mismatch (the model is '{base.arch}', the adapter '{arch}')")
    atype = _str_key(f, "adapter.type")
    if atype != "lora":
        raise GGUFError(f"{where}: expect adapter.type to be 'lora', but got: '{atype}'")
    alpha = f.get("adapter.lora.alpha", 0.0)
    if not isinstance(alpha, (int, float)):
        raise GGUFError(f"{where}: adapter.lora.alpha is {alpha!r}, expected a number")
    if f.has("adapter.alora.invocation_tokens"):
        raise GGUFError(f"{where}: activated LoRA (adapter.alora.invocation_tokens) is not supported by llamapy")
    pairs: dict[str, dict[str, str]] = {}
    for name in f.tensors:
        for suffix in (".lora_a", ".lora_b"):
            if name.endswith(suffix):
                pairs.setdefault(name[: -len(suffix)], {})[suffix[-1]] = name
                break
        else:
            if not name.endswith("_norm.weight"):  # llama.cpp skips norm vectors (its TODO)
                raise GGUFError(f"{where}: LoRA tensor '{name}' has unexpected suffix (expected .lora_a or .lora_b)")
    adapter = LoraAdapter(str(path), float(alpha))
    for name, ab in sorted(pairs.items()):
        adapter.weights[name] = _pair(f, base, where, name, ab, torch.device(device))
    if not adapter.weights:
        raise GGUFError(f"{where}: the adapter has no .lora_a/.lora_b pairs")
    logger("llama_adapter_lora_init_impl").info(
        f"loaded {2 * len(adapter.weights)} tensors from lora file {path} (alpha {adapter.alpha:g}, "
        f"{adapter.n_bytes / (1 << 20):.2f} MiB as float32)")
    return adapter


def _pair(f: GGUFFile, base: GGUFFile, where: str, name: str, ab: dict[str, str], device: torch.device) -> LoraWeight:
    """The checked (A, B) of base tensor `name` (llama.cpp's shape rules, its messages)."""
    if "a" not in ab or "b" not in ab:
        raise GGUFError(f"{where}: LoRA tensor pair for '{name}' is missing one component "
                        f"(has only {name}.lora_{'a' if 'a' in ab else 'b'})")
    if name.endswith("token_embd.weight"):
        raise GGUFError(f"{where}: LoRA on '{name}' (the token embeddings) is not supported by llamapy")
    w = base.tensors.get(name)
    if w is None:
        raise GGUFError(f"{where}: LoRA tensor '{name}' does not exist in base model (hint: maybe wrong base model?)")
    ia, ib = f.tensors[ab["a"]], f.tensors[ab["b"]]
    for t in (ia, ib):
        if len(t.ne) != 2:
            raise GGUFError(f"{where}: tensor '{t.name}' has ne {list(t.ne)}, expected 2 dimensions")
        if t.qtype not in DEQUANTIZE_TYPES:
            raise GGUFError(f"{where}: tensor '{t.name}' has ggml type {t.qtype.name}, which llamapy cannot read")
    if len(w.ne) != 2 or w.ne[0] != ia.ne[0] or w.ne[1] != ib.ne[1]:
        raise GGUFError(f"{where}: tensor '{name}' has incorrect shape (hint: maybe wrong base model?): base ne "
                        f"{list(w.ne)}, lora_a ne {list(ia.ne)} (ne[0] must be {w.ne[0]}), lora_b ne {list(ib.ne)} "
                        f"(ne[1] must be {w.ne[1] if len(w.ne) > 1 else '?'})")
    if ia.ne[1] != ib.ne[0]:
        raise GGUFError(f"{where}: lora_a tensor is not transposed (hint: adapter from \"finetune\" example is no "
                        f"longer supported): '{name}' lora_a ne {list(ia.ne)}, lora_b ne {list(ib.ne)} (rank "
                        f"{ia.ne[1]} != {ib.ne[0]})")
    a = dequantize(f.tensor_data(ia.name), ia.qtype, ia.shape).to(device, torch.float32).clone()  # [r, n_in]
    b = dequantize(f.tensor_data(ib.name), ib.qtype, ib.shape).to(device, torch.float32).clone()  # [n_out, r]
    return LoraWeight(a, b)
