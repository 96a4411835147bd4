"""LoRA adapter flags as llama.cpp spells them (common/arg.cpp): --lora FNAME[,FNAME...] (scale
1), --lora-scaled FNAME:SCALE[,...], repeatable and kept in command-line order (an adapter's id
is its place in that order, as llama-server's /lora-adapters numbers them), and
--lora-init-without-apply (loaded with scale 0; POST /lora-adapters or a request's `lora` sets them)."""
from __future__ import annotations

import argparse


class _LoraAction(argparse.Action):
    """Append (path, scale) pairs to namespace.lora in command-line order."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        items = [v for v in str(values).split(",") if v]
        if not items:
            raise argparse.ArgumentError(self, "expected a file name")
        out = list(getattr(namespace, self.dest, None) or [])
        for item in items:
            if option_string == "--lora":
                out.append((item, 1.0))
                continue
            parts = item.split(":")
            if len(parts) != 2:
                raise argparse.ArgumentError(self, f"lora-scaled format: FNAME:SCALE (got '{item}')")
            try:
                out.append((parts[0], float(parts[1])))
            except ValueError:
                raise argparse.ArgumentError(self, f"'{parts[1]}' in '{item}' is not a number (FNAME:SCALE)") from None
        setattr(namespace, self.dest, out)


def add_lora(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LoRA adapters (llama.cpp's; applied beside the weights, never merged)")
    g.add_argument("--lora", dest="lora", action=_LoraAction, default=[], metavar="FNAME",
                   help="path to LoRA adapter (use comma-separated values to load multiple adapters)")
    g.add_argument("--lora-scaled", dest="lora", action=_LoraAction, default=[], metavar="FNAME:SCALE,...",
                   help="path to LoRA adapter with user defined scaling (format: FNAME:SCALE,...)")
    g.add_argument("--lora-init-without-apply", action="store_true",
                   help="load LoRA adapters without applying them (scale 0; apply later via POST /lora-adapters "
                        "or a request's lora)")


def lora_specs(a: argparse.Namespace) -> tuple[tuple[str, float], ...]:
    """The adapters to load as (path, scale), in command-line order."""
    zero = getattr(a, "lora_init_without_apply", False)
    return tuple((path, 0.0 if zero else scale) for path, scale in (getattr(a, "lora", None) or []))
