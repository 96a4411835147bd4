/* rows_det_x86.c: deterministic mode's products, each element the same bits at any row count. */
#ifndef LP_ROWS_DET_X86_H
#define LP_ROWS_DET_X86_H

#include "mm.h"
#include "mm_det_x86.h"

/* For a caller's own parallel region (layers.c): the rows' forms in buf (lp_det_xprep_bytes)
 * for the fp32 rows x [n, n_in], prepared by lp_det_prep_for (or lp_det_prep_row per row, then
 * lp_det_lanes_for; threads meet after), then the product with this thread's scratch
 * (lp_det_scratch_bytes). */
size_t lp_det_xprep_bytes(int64_t n_in, int64_t n);
lp_xprep lp_det_xprep_at(void *buf, int64_t n_in, int64_t n, const float *x);
/* deterministic mode at AVX2 without VNNI, for x8 (LP_READS_I8) where det_lanes8_rows leaves them: a Q4_0 / Q4_1
 * product's (_4), a Q5_0 / Q5_1 product's (_5), which read the int8 lanes xl8 at their row counts (rows_det_x86.c) */
#define LP_READS_L8_4 64
#define LP_READS_L8_5 128
int lp_det_reads(int type); /* the form a product of the type reads: set xp->reads to the union of a row's products' */
void lp_det_prep_row(const lp_xprep *xp, int64_t r);
void lp_det_lanes_for(const lp_xprep *xp);
void lp_det_prep_for(lp_xprep *xp);
size_t lp_det_scratch_bytes(int64_t n_in);
void lp_mm_det_for(int type, const uint8_t *w, int64_t n_out, const lp_xprep *xp, float *y, int64_t ldy, int accumulate,
                   void *scratch);

#endif
