"""LoRA adapters (model/lora.py, model/lora_apply.py): llama.cpp's own log-probabilities with
--lora / --lora-scaled on a tiny base (tests/data/ref_lora/, scripts/ref_lora_llamacpp.py),
per-sequence scales in one batch, and adapters that do not fit their base refused by name."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from llamapy import Model
from llamapy.batch import Batch
from llamapy.bench.kld import BaseFile, KldStats
from llamapy.bench.perplexity import make_context, perplexity
from llamapy.context import Context
from llamapy.gguf.header import GGUFError
from llamapy.params import ContextParams
from tiny_family import write_tiny_family
from tiny_lora import write_tiny_lora

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "tests/data/ref_lora"
CASES = sorted(p.stem for p in REF.glob("*.json"))
# F16 base and adapters: llamapy's float32 delta against ggml's f16 products, measured KLD 2.3e-5 to 2.6e-5,
# top-1 99.2-100%.  Planted: alpha/rank dropped (the scale alone) KLD 1.3-3.0, top-1 28-48%.
MAX_KLD, MIN_TOP = 0.001, 0.99


def _files(tmp: Path) -> tuple[Path, dict[str, Path]]:
    sys.path.insert(0, str(ROOT / "scripts"))
    from ref_lora_llamacpp import write_files

    meta = json.loads((REF / f"{CASES[0]}.json").read_text())
    base, paths, sha = write_files(tmp)
    assert sha == meta["sha256"], "tests/tiny_family.py or tiny_lora.py changed: rerun scripts/ref_lora_llamacpp.py"
    return base, paths


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    return _files(tmp_path_factory.mktemp("lora"))


@pytest.mark.parametrize("n_ubatch", [64, 8])
@pytest.mark.parametrize("case", CASES)
def test_logits_match_llamacpp(files, case, n_ubatch):
    """llama-perplexity --kl-divergence-base with the case's --lora / --lora-scaled flags
    against llamapy's perplexity run with the same adapters and scales (one ubatch per chunk,
    and ubatches of 8 rows, which without adapters would take the fused C layers)."""
    base, paths = files
    meta = json.loads((REF / f"{case}.json").read_text())
    model = Model.load(base)
    model.add_loras([(str(paths[k]), s) for k, s in meta["loras"]])
    assert model.net.fused is None and model.lora.n_matrices > 0
    stats = KldStats()
    with BaseFile.open(REF / f"{case}.kld", model.n_vocab) as ref:
        ctx = make_context(model, ref.n_ctx, ref.n_ctx, n_ubatch)
        perplexity(ctx, ref.tokens, ref.n_ctx, on_logits=lambda lg, tg: stats.add(lg, ref.next_chunk(), tg))
    print(f"{case} -ub {n_ubatch}: mean KLD {stats.mean_kld:.6f}, same top {stats.same_top:.4f} over {stats.count}")
    assert stats.count == meta["n_chunks"] * (meta["n_ctx"] - 1 - meta["n_ctx"] // 2)
    assert stats.mean_kld <= MAX_KLD
    assert stats.same_top >= MIN_TOP


def _last_logits(ctx: Context, seqs: list[tuple[int, list[int]]]) -> dict[int, torch.Tensor]:
    """Decode each (seq_id, tokens) in ONE batch; the last row's logits per sequence."""
    b, last = Batch(), {}
    for sid, toks in seqs:
        for i, t in enumerate(toks):
            b.add(t, i, [sid], i == len(toks) - 1)
        last[sid] = len(b.token) - 1
    ctx.decode(b)
    return {sid: ctx.get_logits_ith(k).clone() for sid, k in last.items()}


def test_per_sequence_scales_in_one_batch(files):
    """Three sequences in one batch with scales (0), (1) and (0.5) of adapter a: each row's
    logits equal its sequence decoded alone in a context whose global scale is that one (to the
    kernels' row-count noise, 4e-4; the scales move them by 0.1 or more)."""
    base, paths = files
    model = Model.load(base)
    model.add_loras([(str(paths["a"]), 1.0)])
    toks = model.tokenize("the cat sat on the mat")
    params = ContextParams(n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=3)
    ctx = Context(model, params)
    ctx.seq_lora_scales = {0: (0.0,), 1: (1.0,), 2: (0.5,)}
    mixed = _last_logits(ctx, [(0, toks), (1, toks), (2, toks)])
    for sid, s in ((0, 0.0), (1, 1.0), (2, 0.5)):
        alone = Context(model, params)
        alone.lora_scales = (s,)
        ref = _last_logits(alone, [(0, toks)])[0]
        assert torch.allclose(mixed[sid], ref, atol=2e-3), (sid, (mixed[sid] - ref).abs().max())
    assert (mixed[0] - mixed[1]).abs().max() > 0.1 and (mixed[1] - mixed[2]).abs().max() > 0.05


def test_scale_zero_is_the_base(files):
    """An adapter at scale 0 (--lora-init-without-apply) leaves the base's logits."""
    base, paths = files
    plain = Model.load(base)
    model = Model.load(base)
    model.add_loras([(str(paths["a"]), 0.0)])
    toks = plain.tokenize("hello there")
    params = ContextParams(n_ctx=64, n_batch=32, n_ubatch=32)
    a = _last_logits(Context(plain, params), [(0, toks)])[0]
    b = _last_logits(Context(model, params), [(0, toks)])[0]
    assert torch.allclose(a, b, atol=1e-4)


def test_refusals(files, tmp_path):
    """Adapters that do not fit are refused, naming the tensor and the numbers; the model is
    unchanged (no adapter attached)."""
    base, paths = files
    model = Model.load(base)
    cases = {
        "arch": (dict(arch="qwen2"), "model arch and LoRA arch mismatch"),
        "type": (dict(general_type="model"), "expect general.type to be 'adapter'"),
        "shape": (dict(targets=(), output=False, extra={"blk.0.attn_q.weight": ((4, 32), (64, 4))}),
                  "tensor 'blk.0.attn_q.weight' has incorrect shape"),
        "rank": (dict(targets=(), output=False, extra={"blk.0.attn_q.weight": ((4, 64), (64, 5))}),
                 "lora_a tensor is not transposed"),
        "absent": (dict(targets=(), output=False, extra={"blk.9.attn_q.weight": ((4, 64), (64, 4))}),
                   "LoRA tensor 'blk.9.attn_q.weight' does not exist in base model"),
    }
    for name, (kw, msg) in cases.items():
        p = write_tiny_lora(tmp_path / f"{name}.gguf", base, **kw)
        with pytest.raises(GGUFError, match=msg) as e:
            model.add_loras([(str(p), 1.0)])
        print(e.value)
        assert model.lora is None
    with pytest.raises(GGUFError, match="no such file"):
        model.add_loras([(str(tmp_path / "missing.gguf"), 1.0)])
    assert "ne [64, 64], lora_a ne [32, 4]" in str(_refusal(model, tmp_path, cases["shape"][0]))


def _refusal(model: Model, tmp_path: Path, kw: dict) -> GGUFError:
    p = write_tiny_lora(tmp_path / "again.gguf", Path(model.path), **kw)
    try:
        model.add_loras([(str(p), 1.0)])
    except GGUFError as e:
        return e
    raise AssertionError("not refused")


def test_lora_flags():
    """--lora / --lora-scaled keep command-line order (the adapters' ids), comma lists and
    FNAME:SCALE as llama.cpp parses them; --lora-init-without-apply zeroes the scales; a bad
    FNAME:SCALE is refused naming it."""
    from llamapy.cli.lora_flags import lora_specs
    from llamapy.cli.main import build_parser

    ap = build_parser()
    for cmd in (["serve"], ["run"], ["perplexity"]):
        a = ap.parse_args([*cmd, "--lora", "a.gguf", "--lora-scaled", "b.gguf:0.5,c.gguf:-2", "--lora", "d.gguf,e.gguf"])
        assert lora_specs(a) == (("a.gguf", 1.0), ("b.gguf", 0.5), ("c.gguf", -2.0), ("d.gguf", 1.0), ("e.gguf", 1.0))
    a = ap.parse_args(["serve", "--lora", "a.gguf", "--lora-scaled", "b.gguf:0.5", "--lora-init-without-apply"])
    assert lora_specs(a) == (("a.gguf", 0.0), ("b.gguf", 0.0))
    for bad in ("b.gguf", "b.gguf:x", "b:c:0.5"):
        with pytest.raises(SystemExit):
            ap.parse_args(["serve", "--lora-scaled", bad])
