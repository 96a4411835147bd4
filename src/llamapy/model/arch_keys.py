"""Metadata keys that change what a model computes and that llamapy does not implement for the
file's architecture: a file that sets one to anything but its neutral value is refused at load
(GGUFError naming the key and its byte offset), never run as if the key were absent.

Among them are keys llama.cpp itself applies to every architecture (`{arch}.rope.scaling.type`
yarn or longrope, `rope.scaling.attn_factor`, `expert_count`, `attention.causal`) and keys that
declare a computation the architecture here does not do (soft-capping, a sliding window
outside gemma2/gemma3/gpt-oss, an attention scale); gpt-oss reads yarn and the attention factor.  Torch-free: `llamapy mem` runs it on a header."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..gguf.header import GGUFError, GGUFHeader, short_repr


def _is(*values: Any) -> Callable[[Any], bool]:
    return lambda v: not isinstance(v, bool) and isinstance(v, (int, float, str)) and v in values


@dataclass(frozen=True, slots=True)
class KeyRule:
    key: str  # after "{arch}."
    neutral: Callable[[Any], bool]  # values that leave the computation as llamapy does it
    what: str  # what the key asks for, for the message
    archs: tuple[str, ...] = ()  # architectures that implement it (any value is theirs to read)
    only: tuple[str, ...] = ()  # non-empty: the rule is for these architectures alone


MOE_ARCHS = ("llama", "qwen3moe", "gpt-oss")  # model/moe.py (no shared experts)

KEY_RULES: tuple[KeyRule, ...] = (
    # gpt-oss: YaRN (model/rope.py) with any attention factor
    KeyRule("rope.scaling.type", _is("none", "linear"), "a RoPE scaling other than none and linear", ("gpt-oss",)),
    KeyRule("rope.scaling.type", _is("none", "linear", "yarn"), "a RoPE scaling other than none, linear and yarn",
            only=("gpt-oss",)),
    # phi3: LongRoPE's factor (archs/phi3.py); gpt-oss: YaRN's (model/rope.py scales cos and sin by it)
    KeyRule("rope.scaling.attn_factor", _is(1.0), "a RoPE attention factor (llama.cpp scales cos and sin by it)",
            ("gpt-oss", "phi3")),
    KeyRule("rope.dimension_sections", lambda v: False, "multi-section RoPE (M-RoPE)"),
    KeyRule("attn_logit_softcapping", _is(0.0), "attention logit soft-capping", ("gemma2",)),
    KeyRule("final_logit_softcapping", _is(0.0), "final logit soft-capping", ("gemma2", "gemma3")),
    # phi3: read and not applied, as llama.cpp (hparams.py)
    KeyRule("attention.sliding_window", _is(0), "sliding-window attention", ("gemma2", "gemma3", "phi3", "gpt-oss")),
    KeyRule("attention.sliding_window_pattern", lambda v: False, "a sliding-window layer pattern",
            ("gemma2", "gemma3", "gpt-oss")),
    KeyRule("attention.scale", _is(0.0), "an attention scale other than 1/sqrt(head size)"),
    KeyRule("attention.causal", lambda v: v is True, "non-causal attention", ("bert", "nomic-bert")),
    KeyRule("expert_count", _is(0), "mixture-of-experts layers", MOE_ARCHS),
    KeyRule("expert_used_count", _is(0), "mixture-of-experts layers", MOE_ARCHS),
    # build_moe_ffn's w_scale: llama and qwen3moe never read it (0), so any other value is refused
    KeyRule("expert_weights_scale", _is(0.0, 1.0), "a scale of the experts' weights"),
    KeyRule("expert_shared_count", _is(0), "shared experts"),
    KeyRule("expert_shared_feed_forward_length", _is(0), "shared experts"),
)


def check_keys(f: GGUFHeader, arch: str) -> None:
    """GGUFError for the first key of KEY_RULES the file sets to a non-neutral value for an
    architecture that does not implement it."""
    for rule in KEY_RULES:
        fld = f.fields.get(f"{arch}.{rule.key}")
        if fld is None or arch in rule.archs or (rule.only and arch not in rule.only) or rule.neutral(fld.value):
            continue
        raise GGUFError(f"{f.path.name}: metadata '{fld.name}' (key at byte {fld.offset}) = {short_repr(fld.value)} "
                        f"asks for {rule.what}, which llamapy does not implement for '{arch}' (refused rather than "
                        f"ignored: the logits would differ from the model's)")
