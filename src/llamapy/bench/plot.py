"""--plot: prompt-processing t/s and the reserved compute buffer against -ub, one line per
other option combination (the seed's question: what does a smaller micro-batch cost?)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .llama_bench import TestResult

MiB = 1024 * 1024


def plot_ubatch(results: list[TestResult], path: str | Path) -> Path:
    """Write a PNG with two panels sharing the -ub axis: t/s of the pp tests (mean ± sd) and
    compute MiB.  Raises ValueError if no pp test ran (nothing to draw)."""
    try:
        import matplotlib
    except ImportError as e:
        raise RuntimeError("--plot needs matplotlib: pip install 'llamapy[plot]'") from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pp = [r for r in results if r.inst.n_prompt > 0 and r.inst.n_gen == 0]
    if not pp:
        raise ValueError("--plot draws prompt-processing tests against -ub, but no pp test ran (set -p > 0)")
    series: dict[str, list[TestResult]] = defaultdict(list)
    for r in pp:
        i = r.inst
        label = f"{i.test_name} b={i.n_batch} ctk={i.type_k} ctv={i.type_v} fa={i.flash_attn} t={i.n_threads}"
        series[label].append(r)
    fig, (ax_ts, ax_mem) = plt.subplots(2, 1, sharex=True, figsize=(7, 6))
    for label, rs in series.items():
        rs.sort(key=lambda r: r.inst.n_ubatch)
        ub = [r.inst.n_ubatch for r in rs]
        ax_ts.errorbar(ub, [r.avg_ts() for r in rs], yerr=[r.stddev_ts() for r in rs], marker="o", capsize=3, label=label)
        ax_mem.plot(ub, [r.compute_bytes / MiB for r in rs], marker="s", label=label)
    ax_ts.set_ylabel("prompt t/s")
    ax_ts.set_title(f"{pp[0].model_type}: prompt processing vs micro-batch size")
    ax_ts.legend(fontsize=7)
    ax_ts.grid(alpha=0.3)
    ax_mem.set_ylabel("compute buffer (MiB)")
    ax_mem.set_xlabel("-ub (n_ubatch)")
    ax_mem.set_xscale("log", base=2)
    ubs = sorted({r.inst.n_ubatch for r in pp})
    ax_mem.set_xticks(ubs, [str(u) for u in ubs])
    ax_mem.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out
