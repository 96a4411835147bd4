/* Static functions for rows_det_x86.c (which defines DET_ALONE first): which of --deterministic's products at
 * the AVX2 level without VNNI take the default's int8 lanes (lanes8_x86.c, mm_lanes.h lanes8_chunk) on xp->xl8,
 * filled from the fp32 rows as lp_mm fills them (lp_xlanes8_fill), not det8's tile on x8: the same bits (the
 * rows' int8 are lanes8's rounding, lp_x8_row; the float step per block of 32 the same: tests/
 * test_deterministic_kernels.py test_det_lanes8_rows_equal_one_row), faster below det8's panels. */
#ifndef LP_DET_LANES8_X86_H
#define LP_DET_LANES8_X86_H

#include "mm.h"
#include "rows_det_x86.h"

/* The most rows a product of this type takes lanes8 at (from DET_ALONE + 1; 0: never, as at AVX-512 and
 * AVX-VNNI, no lanes8).  -t 1 CPU time on the 2-core EPYC, kernel_ab.py --det against det8 (SmolLM2's
 * 1536 x 576, 576 x 1536): Q4_0 / Q4_1 1.08-1.31x at 8, 1.08-1.20x at 16, 1.04-1.11x at 17-20, from 24 the
 * panels (lanes8 0.90-0.93x there); Q5_0 / Q5_1 1.07-1.19x at 24-40, 0.90-0.98x at 48 (the panels). */
static inline int64_t det_lanes8_rows(int type) {
#if defined(LP_LANES8)
    return type == LP_Q4_0 || type == LP_Q4_1 ? 23 : type == LP_Q5_0 || type == LP_Q5_1 ? 40 : 0;
#else
    (void)type;
    return 0;
#endif
}
#define DET_LANES8_MOST 40 /* det_lanes8_rows' largest: xl8 laid out for DET_ALONE + 1 .. this many rows */

/* Does a product of n rows with the lanes8 type bits `bits` (lp_det_reads: LP_READS_L8_4 / _5) read xl8? */
static inline int det_l8_in(int bits, int64_t n) {
    return n > DET_ALONE && (((bits & LP_READS_L8_4) && n <= det_lanes8_rows(LP_Q4_0)) ||
                             ((bits & LP_READS_L8_5) && n <= det_lanes8_rows(LP_Q5_0)));
}
/* Does some product of xp read xl8 (laid out: det_l8_bytes)? */
static inline int det_reads_l8(const lp_xprep *xp) { return xp->xl8.n_grp && det_l8_in(xp->reads, xp->n); }
/* Does some product of xp read x8: det8's types (LP_READS_I8), the lanes8 types past det_lanes8_rows or at
 * DET_ALONE rows or fewer (det8_row_x86.c, one row det8's)? */
static inline int det_reads_x8(const lp_xprep *xp) {
    return (xp->reads & LP_READS_I8) || ((xp->reads & LP_READS_L8_4) && !det_l8_in(LP_READS_L8_4, xp->n)) ||
           ((xp->reads & LP_READS_L8_5) && !det_l8_in(LP_READS_L8_5, xp->n));
}
/* xl8's bytes in a det xprep of n rows of n_in. */
static inline size_t det_l8_bytes(int64_t n_in, int64_t n) {
#if defined(LP_LANES8)
    return n > DET_ALONE && n <= DET_LANES8_MOST ? lp_xlanes8_bytes(n_in, n) : 0;
#else
    return (void)n_in, (void)n, 0;
#endif
}

#endif
