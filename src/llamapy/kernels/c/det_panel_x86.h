/* det_panel_x86.c: deterministic mode's many-row products on the default prompt's int8 panels
 * instead of det8's lane tiles: at the AVX2 level (no AVX-512, no AVX512-VNNI) the types of a
 * scale per 32 (q8mm32_x86.c) and Q4_K / Q5_K / Q6_K (q8mm_x86.c) instead of det8_avx2_x86.c's
 * tiles; at the AVX512-VNNI level (without AMX: its tiles, det8_amx_x86.c, untouched) the types
 * of a scale per 32 (q8mm32_512.inc) instead of det8_x86.c's 16-row lanes.  (The K-quants at
 * AVX-512 are the int16 lanes' order, lanes_x86.c / det1_x86.c, on int16 activations: an int8
 * panel would change their bits at every row count.)
 *
 * "The order of the fastest path, the others following it": det8's sequence per (row, output) is
 *   i   = the exact int32 sum of q_w q_x over the block of 32 (Q6_K: 16-group)
 *   acc = fmaf((float)i, d_w * d_x, acc)      (+ fmaf(sum_x, m_w, acc) with a minimum)
 * in block order, x rounded per row (lp_x8_row).  A panel tile computes the same exact integers
 * (any instruction order: integer sums are associative; its int16 steps stay exact as det8's)
 * and, in its det form (p32_tile_as / q8_tile_as with det = 1), the same float step on the same
 * operands in the same order, reading det8's own rows (lp_x8: q, d, sum, qs) and no residuals.
 * So every element has det8's bits whichever path its row count takes
 * (tests/test_deterministic_kernels.py: 1..70 and 530 rows against each row alone). */
#ifndef LP_DET_PANEL_X86_H
#define LP_DET_PANEL_X86_H

#include "det8_x86.h"

#if defined(LP_AVX2) && !defined(LP_AVX512) && !defined(LP_VNNI)
#define LP_DET_PANEL 1   /* every det8 type (q8mm_x86.c's det tiles too) */
#define LP_DET_PANEL32 1 /* the types of a scale per 32 (q8mm32_x86.c lp_q8mm32_det) */
#elif defined(LP_AVX512) && defined(LP_VNNI) && !defined(LP_AMX)
#define LP_DET_PANEL32 1
#endif
/* The rows from which a product takes the panels: the crossover with det8's tiles (kernel_ab.py --det
 * -t 1 --cpu-time, Zen 3 AVX2): Q4_K / Q6_K 640x2048 faster from 2 rows (1.77x / 1.56x at 2, 1.2x / 1.09x
 * at 16, 1.39x / 1.30x at 512: det8's 16-lane groups idle at few rows); Q4_0 / Q4_1 1536x576 0.93x /
 * 0.97x at 16, 1.16x / 1.18x at 32, 1.72x / 1.66x at 512; Q5_0 2048x640 0.93x at 32, 1.06x at 48, 1.16x
 * at 512 (Q5_1 1536x576 0.99x at 32, 1.05x at 48); Q8_0 (signed: vpsignb a step; 2048x640 / 256x640)
 * 0.95x / 0.97x at 32, 1.02x / 1.04x at 64, 1.06x / 1.08x at 128, 1.08x / 1.11x at 512. */
#define LP_DET_PANEL_ROWS_K 2     /* Q4_K, Q5_K, Q6_K */
/* Q6_K from 8 to 31 rows takes rows_det_x86.c's int16 lanes instead where the build has them (det_lanes16:
 * 640x2048 -t 1 --cpu-time, panels / lanes: 3 rows 1.32x, 4 1.22x, 8 0.93x, 16 0.92x, 32 0.99x, 64 1.16x) */
#define LP_DET_LANES_Q6K_LO 8
#define LP_DET_LANES_Q6K_HI 32
#if defined(LP_AVXVNNI)
#define LP_DET_LANES_Q6K 0 /* (rows_det_x86.c's det_lanes16 is off there) */
#else
#define LP_DET_LANES_Q6K 1
#endif
#if defined(LP_DET_PANEL)
#define LP_DET_PANEL_ROWS_4 24    /* Q4_0, Q4_1 */
#define LP_DET_PANEL_ROWS_5 48    /* Q5_0, Q5_1 */
#define LP_DET_PANEL_ROWS_Q8 64   /* Q8_0 */
#define LP_DET_PANEL_WIDE_IN 0     /* (no row length of its own) */
#define LP_DET_PANEL_ROWS_WIDE 0
#else
/* AVX512-VNNI: against det8_x86.c's 16-row lanes (kernel_ab.py --det -t 1 --cpu-time, Zen 5, panels / lanes,
 * Q4_0 Q5_0 Q8_0 / Q4_0 Q4_1 Q5_1 Q8_0): 2048x640 at 64 rows 0.95 0.92 0.88, 96 1.07 1.03 1.04, 128 1.06 1.07
 * 1.01, 512 1.14 1.14 1.15; 1536x576 at 64 0.87-0.92, 96 1.01-1.02, 128 1.03-1.08, 512 1.09 1.30 1.25 1.09.
 * Longer rows later: 640x2048 (Q5_0 Q8_0 Q4_1) at 128 rows 0.83-0.87, 192 0.92-1.02, 256 1.05-1.08, 512 1.23
 * 1.15 1.26 (the likely cause: p32_pack's panel, 32 rows of 2048 = 64 KiB, past L1 while it is written).
 * (A second run, these thresholds: at 128 rows 0.98-1.10, at 512 1.17-1.36; shared machine.)  Prompts at
 * one thread (decode_ab.py --prefill -p 512 -t 1 --cpu-time, LLAMAPY_DETERMINISTIC=1): Gemma 3 270M 1.04x
 * (1.06x best), SmolLM2 135M 1.18x (1.15x), logits the same bits. */
#define LP_DET_PANEL_ROWS_4 128
#define LP_DET_PANEL_ROWS_5 128
#define LP_DET_PANEL_ROWS_Q8 128
#define LP_DET_PANEL_WIDE_IN 1024  /* rows longer than this take the panels only */
#define LP_DET_PANEL_ROWS_WIDE 256 /* from this many rows */
#endif

/* Does a det product of this type, row length and n rows take the panels? */
int lp_det_panel_covers(int type, int64_t n_in, int64_t n);
/* Does every det8 product of n rows (lp_det8_covers' types, lp_mm_det_covers' row lengths) take
 * them?  Then x8's lanes (lp_x8_lanes_block) go unread. */
int lp_det_panel_all(int64_t n);
size_t lp_det_panel_scratch_bytes(int64_t n_in);
/* Inside a parallel region, every thread: y (+)= x8's rows W^T, the output rows split among the
 * threads (lp_mm_det_for's contract).  0, or -1 (every thread alike, nothing written, x8's lanes
 * filled for det8's tiles) without memory. */
int lp_det_panel_for(int type, const uint8_t *w, int64_t n_out, const lp_x8 *x8, float *y, int64_t ldy, int accumulate,
                     void *scratch);

/* (the panels' det entries: q8mm32_x86.h lp_q8mm32_det, q8mm_x86.h lp_q8mm_det) */

#endif
