"""llamapy's side of vs_llamacpp.py, run as a child process so that the ISA environment
(isa_env.py) is in place before torch and llamapy's kernels load:

    py_side.py bench MODEL TEXT SIZES_JSON [--kld-base FILE]   pp/tg, batched S_TG, perplexity (+ KLD)
    py_side.py kld-base MODEL TEXT SIZES_JSON FILE             the f32 reference's --kl-divergence-base file

Prints progress on stderr and one line `RESULT {json}` on stdout, which carries the ISA the
kernels ran at (cpu_isa) and ATen's capability, so the parent can check the level took."""
from __future__ import annotations

import gc
import json
import logging
import random
import sys
import time
from pathlib import Path

from sizes import Sizes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _log(msg: str) -> None:
    print("  llamapy " + msg, file=sys.stderr, flush=True)


def _setup(s: Sizes) -> dict[str, str]:
    import torch

    from llamapy.bench.info import cpu_isa

    logging.getLogger("llamapy").setLevel(logging.ERROR)  # as llama-bench silences llama's log
    torch.set_num_threads(s.threads)
    return {"cpu_isa": cpu_isa(), "aten": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads()}


def kld_base(model_path: Path, text: Path, s: Sizes, base: Path) -> dict:
    """llamapy with every weight dequantized to float32 writes the --kl-divergence-base file."""
    from llamapy.bench import kld
    from llamapy.bench import perplexity as ppl
    from llamapy.model.model import Model

    res: dict = _setup(s)
    t0 = time.perf_counter()
    model = Model.load(model_path, exact=True)
    tokens = model.tokenize(text.read_text(encoding="utf-8"), add_special=True)
    n_chunk = len(tokens) // s.ppl_ctx if s.ppl_chunks < 0 else min(s.ppl_chunks, len(tokens) // s.ppl_ctx)
    with kld.BaseWriter.create(base, s.ppl_ctx, model.n_vocab, tokens, n_chunk) as w:
        r = ppl.perplexity(ppl.make_context(model, s.ppl_ctx, 2048, 512, n_threads=s.threads), tokens, s.ppl_ctx,
                           s.ppl_chunks, on_logits=w)
    _log(f"--exact base: PPL = {r.ppl:.4f} over {r.n_chunk} chunks -> {base} ({time.perf_counter() - t0:.1f} s)")
    res["ppl_f32"] = r.ppl
    return res


def bench(model_path: Path, text: Path, s: Sizes, base: Path | None) -> dict:
    """llama-bench's pp/tg, llama-batched-bench's S_TG at B = npl (unified cache; none when npl
    is 0), perplexity at -c ppl_ctx (none when ppl_chunks is 0; scored against `base` too when
    given), and the weights as kept."""
    from llamapy import Context, ContextParams
    from llamapy.bench import batched_bench as bb
    from llamapy.bench import kld
    from llamapy.bench import llama_bench as lb
    from llamapy.bench import perplexity as ppl
    from llamapy.model.model import Model

    res: dict = _setup(s)
    model = Model.load(model_path)
    res["resident"], res["file_bytes"] = model.n_bytes_resident, model.n_bytes_file
    p = lb.BenchParams(model=str(model_path), n_prompt=[s.pp], n_gen=[s.tg], n_threads=[s.threads], reps=s.reps)
    rng = random.Random(1)
    for inst in lb.get_instances(p):
        t0 = time.perf_counter()
        r = lb.run_instance(model, inst, p, rng)
        res["pp" if inst.n_gen == 0 else "tg"] = r.avg_ts()
        _log(f"{inst.test_name}: {r.avg_ts():.2f} ± {r.stddev_ts():.2f} t/s ({time.perf_counter() - t0:.1f} s)")
    if s.npl > 0:
        gc.collect()
        ctx = Context(model, ContextParams(n_ctx=s.npl * (s.npp + s.ntg), n_batch=2048, n_ubatch=512, n_seq_max=s.npl,
                                           kv_unified=True, n_threads=s.threads))
        rows = list(bb.run_batched_bench(ctx, [s.npp], [s.ntg], [s.npl]))
        res["batched"] = rows[-1].speed_tg
        _log("batched: " + bb.md_row(rows[-1]))
        del ctx
    if s.ppl_chunks != 0:
        gc.collect()
        ctx = ppl.make_context(model, s.ppl_ctx, 2048, 512, n_threads=s.threads)
        tokens = model.tokenize(text.read_text(encoding="utf-8"), add_special=True)
        run = kld.KldRun(kld.BaseFile.open(base, model.n_vocab)) if base is not None else None
        try:
            r = ppl.perplexity(ctx, tokens, s.ppl_ctx, s.ppl_chunks, on_logits=run)
        finally:
            if run is not None:
                run.base.close()
        res["ppl"] = r.ppl
        _log(f"PPL = {r.ppl:.4f} +/- {r.ppl_err:.5f} over {r.n_chunk} chunks")
        if run is not None:
            res["same_top"], res["kld"] = run.stats.same_top, run.stats.mean_kld
            _log(f"vs f32 reference: same top p {100 * run.stats.same_top:.3f} %, mean KLD {run.stats.mean_kld:.6f}")
    return res


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] not in ("bench", "kld-base"):
        print(__doc__, file=sys.stderr)
        return 2
    what, model, text, s = argv[0], Path(argv[1]), Path(argv[2]), Sizes.from_json(argv[3])
    if what == "kld-base":
        res = kld_base(model, text, s, Path(argv[4]))
    else:
        base = Path(argv[argv.index("--kld-base") + 1]) if "--kld-base" in argv else None
        res = bench(model, text, s, base)
    print("RESULT " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
