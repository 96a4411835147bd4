/* row1q8k_x86.c: Q4_K / Q6_K one-row products against Q8_K activations (x86 AVX2) and the
 * activations' Q8_K form. */
#ifndef LP_ROW1Q8K_X86_H
#define LP_ROW1Q8K_X86_H

#include "quants.h"

/* Does the product of this type on the rows x [n_rows, n_in] read them as Q8_K, every row (1),
 * or not (0: another type, other row counts, not x86, a block of outliers)?  1 to LP_Q8K_ROWS - 1
 * rows without VNNI (from LP_F32_ROWS rows, mm.c q8k_chunk, a row with an outlier block takes the
 * int16 form, and over a quarter such rows the whole product); 1-4 rows with VNNI, none on AMD
 * Zen 4 (lp_xrows_q8k). */
int lp_q8k_takes(int type, const float *x, int64_t n_in, int64_t n_rows);
/* Row r of x [n_in] as Q8_K into xr (q8, d8, bs8): ggml's quantize_row_q8_K_ref, per 256. */
void lp_prepare_q8k_row(const float *x, lp_xrows xr, int64_t r);
/* nr (1 or 2) weight rows w[0..nr) of Q4_K (type LP_Q4_K) or Q6_K (LP_Q6_K) against row r's
 * Q8_K values: y[0..nr); pf > 0: each block's bytes pf further on prefetched as it computes. */
void lp_rows_q8k(int type, int nr, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr, int64_t r,
                 int64_t pf, float *y);
/* Rows o0..o1 of w (rb bytes a row, n_out rows in all) of Q4_K / Q6_K against activation row 0
 * in Q8_K (lp_rows_q8k), or of Q4_K / Q5_K in the int16 split form (lp_row1x2_k45_split), all but
 * an odd last one: y[o] = (acc_y: +=) row o's product, each row's bits those of its one-row
 * product; returns the rows done (0: no such path, one row).  With h = (o1 - o0) / 2, rows
 * o0 + j and o0 + h + j in one pass (two ascending streams: a task of LP_MM_CHUNK rows of 2048,
 * 8 rows apart, in other pages), each block prefetching its row's bytes o1 - o0 rows on. */
int64_t lp_rows_q8k_run(int type, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1, int64_t n_out, const lp_xrows *xr,
                        float *y, int acc_y);

#endif
