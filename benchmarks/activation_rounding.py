#!/usr/bin/env python3
"""What rounding the products' activations to fewer bits costs in accuracy, on tests/
test_gemma3.py's case: 1,100 tokens of prose teacher-forced through Gemma 3 270M in 512-row
ubatches, against transformers' f32 forward of the same GGUF (the test holds top-1 agreement
>= 99% and max |logit diff| < 0.5).  Each block matrix product's activation rows are rounded
before the product, as an integer kernel with that many bits would see them: per block of
--block values, scale max|x| / (2^(bits-1) - 1), round to nearest (llama.cpp's Q8_0
activations are --bits 8 --block 32, its Q8_K --block 256); --keep K leaves each row's K
largest |x| exact (LLM.int8's split); --where layers | head | all.  llamapy's kernels round to
int16 (the products here then see already-rounded values).

    .venv/bin/python benchmarks/activation_rounding.py                       # int8 / 32, all products
    .venv/bin/python benchmarks/activation_rounding.py --where head --keep 16
Not a test: it takes a minute or two and needs transformers.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def rounded(x, bits: int, block: int, keep: int):
    """x [n, n_in] with each row's blocks rounded to `bits`-bit integers times a scale."""
    import torch

    if keep:
        idx = x.abs().topk(keep, dim=-1).indices  # [n, keep]
        kept = torch.gather(x, -1, idx)
        x = x.scatter(-1, idx, 0.0)
    xb = x.reshape(-1, block)
    s = xb.abs().amax(-1, keepdim=True) / (2 ** (bits - 1) - 1)
    s[s == 0] = 1.0
    out = (torch.round(xb / s) * s).reshape(x.shape)
    return out.scatter(-1, idx, kept) if keep else out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="gemma3-270m")
    ap.add_argument("--bits", type=int, default=8)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--keep", type=int, default=0)
    ap.add_argument("--where", choices=("layers", "head", "all"), default="all")
    a = ap.parse_args(argv)

    import torch
    import transformers

    import llamapy
    from llamapy.model import block_matrix

    model = llamapy.Model.load(a.model)
    path = Path(model.path)
    data = ROOT / "tests" / "data"
    ids = model.tokenize((data / "prose_en.txt").read_text() + (data / "prose_en_2.txt").read_text())[:1100]
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    with torch.inference_mode():
        want = ref(torch.tensor([ids])).logits[0]  # [n, n_vocab]
    del ref

    exact = block_matrix.BlockMatrix._mm
    n_vocab = model.n_vocab

    def product(self, x, y, accumulate, int8):  # BlockMatrix._mm's signature
        head = self.n_out == n_vocab
        if a.where == "all" or (a.where == "head") == head:
            x = rounded(x.contiguous(), a.bits, a.block, a.keep).contiguous()
        return exact(self, x, y, accumulate, int8)

    block_matrix.BlockMatrix._mm = product
    ctx = llamapy.Context(model, llamapy.ContextParams(n_ctx=2048, n_ubatch=512))
    b = llamapy.Batch()
    for i, t in enumerate(ids):
        b.add(t, i, [0], logits=True)
    ctx.decode(b)
    ours = ctx.get_logits()
    agree = (ours.argmax(-1) == want.argmax(-1)).float().mean().item()
    print(f"{path.name}: int{a.bits} activations per block of {a.block}, {a.keep} kept exact a row, in {a.where} "
          f"products: top-1 agreement {agree:.2%}, max |logit diff| {(ours - want).abs().max().item():.3f} "
          f"(tests/test_gemma3.py holds >= 99% and < 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
