"""The MoE rows kernel's working memory for memory/estimate.py: a multi-row ubatch's experts run
in one C call (kernels/c/moe_rows.c lp_moe_rows) whose bytes a MoeWork (kernels/moe_row.py, one
per model, a buffer per calling thread) grows to the largest ubatch's need and keeps; during
the call each of the kernel's threads also holds lp_mm's scratch.  The C path runs where the
loader's block kernels do (not gpt-oss: its experts take the per-expert path) and only for
ubatches of 2 rows or more.  Torch-free.

lp_moe_rows_bytes(n_t, counts, n_embd, n_ff), restated as a bound over every routing of n_t
rows to k experts each (n_slots = n_t * k slots, at most min(n_expert, n_slots) experts active):

  the floats:       xg [n_slots, n_embd], g and u [n_slots, n_ff], out [n_t, n_embd]
  per active expert: its table entry (active_expert, under ACTIVE_EXPERT bytes) and its rows
                    prepared twice (lp_xprep_bytes of n_embd and of n_ff for its c rows, each
                    64-aligned plus 64), where lp_xprep_bytes(n_in, c) (kernels/c/mm_xprep.inc)
                    is the int16 rows with scales and sums (2.5 bytes a value, 4.75 where few
                    rows keep them split too, + 384), a bf16 copy (2, + 64), the rows in
                    lanes of up to 16 (2.5 a value of c rounded up to 16, + 128), and at the AVX2
                    level without VNNI the int8 rows its four 32-value types read at every count
                    (lanes8_x86.c from 5 rows: 1.375 a value of c rounded up to 8, + 128;
                    det8_row_x86.c's x8 at 2-4 rows: at most 28.5 n_in + 448)

so each expert's part is at most 6.75 n_in c + (2.5 + 29 / 16) n_in ceil16(c) + 1024 bytes per
form, and the sum of ceil16(c) over the experts at most n_slots + 15 n_act.  The int8 rows are
counted only where the kernels lay them out (`int8_rows`: kernels/build.py int8_rows_expected);
elsewhere they would overstate the buffer by about a third at a 512-row ubatch."""
from __future__ import annotations

from ..kernels.build import int8_rows_expected
from ..kernels.types import mm_scratch_bound

F32 = 4
ACTIVE_EXPERT = 512  # bytes: sizeof(active_expert), three int64 and two lp_xprep (about 376 on x86-64)
XPREP_FIXED = 576  # bytes of one lp_xprep_bytes besides its per-value parts
INT8_FIXED = 448  # the AVX2 level's int8 rows (lanes8 or x8) besides their per-value parts
LANE_ROWS = 16  # the lanes' row group (LP_NL: 16 at the AVX-512 level, 8 at AVX2)


def xprep_bound(n_in: int, n: int, int8_rows: bool = True) -> int:
    """At least lp_xprep_bytes(n_in, n) (kernels/c/mm_xprep.inc, see the module docstring);
    int8_rows: the AVX2 level's int8 rows counted (False: a level without them)."""
    ceil16 = -(-n // LANE_ROWS) * LANE_ROWS
    int8 = 0 if not int8_rows else (11 * n_in * ceil16) // 8 + 128 if n >= 5 else (57 * n_in) // 2 + INT8_FIXED if n >= 2 else 0
    return (27 * n_in * n) // 4 + (5 * n_in * ceil16) // 2 + XPREP_FIXED + 2 + int8


def moe_rows_bound(n_t: int, n_expert: int, k: int, n_embd: int, n_ff: int, int8_rows: bool = True) -> int:
    """At least lp_moe_rows_bytes for n_t rows routed to k of n_expert experts each, whatever the
    routing (the module docstring); int8_rows as xprep_bound's."""
    if n_t < 1 or k < 1:
        return 0
    n_slots = n_t * k
    n_act = min(n_expert, n_slots)
    floats = n_slots * (n_embd + 2 * n_ff) + n_t * n_embd
    ceil16_sum = n_slots + (LANE_ROWS - 1) * n_act
    int8_value, int8_fixed = ((29 * ceil16_sum) // 16 + 1, INT8_FIXED) if int8_rows else (0, 0)
    per_value = (27 * n_slots) // 4 + 1 + (5 * ceil16_sum) // 2 + 1 + int8_value
    xbytes = (n_embd + n_ff) * per_value + n_act * (2 * (XPREP_FIXED + 2 + 63 + 64 + int8_fixed))
    return n_act * ACTIVE_EXPERT + 63 + F32 * floats + 63 + xbytes + 64


def moe_work_bytes(n_ubatch: int, n_threads: int, n_expert_used: int, n_ff_exp: int, n_embd: int,
                   n_expert: int, int8_rows: bool = True) -> tuple[int, int]:
    """(MoeWork's buffer for one calling thread after a ubatch of n_ubatch rows, the kernel's
    threads' lp_mm scratch during its call: n_threads x mm_scratch_bound of the wider of n_embd
    and n_ff_exp); (0, 0) below 2 rows (one row takes lp_moe_row, no MoeWork)."""
    if n_ubatch < 2 or not n_expert:
        return 0, 0
    return (moe_rows_bound(n_ubatch, n_expert, n_expert_used, n_embd, n_ff_exp, int8_rows),
            n_threads * mm_scratch_bound(max(n_embd, n_ff_exp)))


def moe_work_terms(hp, n_t: int, blocks: bool, n_threads: int) -> list[tuple]:
    """memory/estimate.py's ComputeTerm fields (name, shape, phase, bytes per element, call) for
    the C path's bytes: MoeWork lasts (kept between ubatches: "persistent"), the threads' scratch
    only during the FFN's call; none where the path does not run."""
    if not (blocks and hp.n_expert) or getattr(hp, "arch", "") == "gpt-oss":
        return []
    work, scratch = moe_work_bytes(n_t, n_threads, hp.n_expert_used, hp.n_ff_exp, hp.n_embd, hp.n_expert,
                                   int8_rows_expected())
    if not work:
        return []
    return [("ffn_moe_work (MoeWork: lp_moe_rows' bytes, kept)", (work,), "persistent", 1, ""),
            ("ffn_moe_rows scratch (lp_mm, per thread)", (scratch,), "ffn", 1, "ffn_moe_rows")]
