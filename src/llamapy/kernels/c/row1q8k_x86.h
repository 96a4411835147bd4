/* row1q8k_x86.c: Q4_K / Q6_K one-row products against Q8_K activations (x86 AVX2), the same
 * products of several rows with the weights decoded once, and the activations' Q8_K form. */
#ifndef LP_ROW1Q8K_X86_H
#define LP_ROW1Q8K_X86_H

#include "quants.h"

/* Does the product of this type on the rows x [n_rows, n_in] read them as Q8_K, every row (1),
 * or not (0: another type, other row counts, an ISA with VNNI, a block of outliers)?  Q4_K: 1-4
 * rows; Q6_K: 1 to LP_Q8K_ROWS - 1 rows (from LP_F32_ROWS rows only where no row has an
 * outlier block: else the whole product takes the int16 form). */
int lp_q8k_takes(int type, const float *x, int64_t n_in, int64_t n_rows);
/* Row r of x [n_in] as Q8_K into xr (q8, d8, bs8): ggml's quantize_row_q8_K_ref, per 256. */
void lp_prepare_q8k_row(const float *x, lp_xrows xr, int64_t r);
/* nr (1 or 2) weight rows w[0..nr) of Q4_K (type LP_Q4_K) or Q6_K (LP_Q6_K) against row r's
 * Q8_K values: y[0..nr); pf > 0: each block's bytes pf further on prefetched as it computes. */
/* nw (1, 2) weight rows w0, w1 of Q4_K / Q6_K against the nr activation rows rows[0..nr) (each
 * with q8on set): y[v nr + t] bit for bit lp_rows_q8k's one-row product of weight row v and row
 * rows[t] -- the weights' super-blocks decoded once for LP_Q8K_TILE rows at a time (a batched
 * decode's LP_F32_ROWS to LP_Q8K_ROWS - 1 rows, mm.c q8k_chunk). */
#define LP_Q8K_TILE 16
void lp_rows_q8k_many(int type, int nw, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr,
                      const int64_t *rows, int nr, float *y);
void lp_rows_q8k(int type, int nr, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr, int64_t r,
                 int64_t pf, float *y);

#endif
