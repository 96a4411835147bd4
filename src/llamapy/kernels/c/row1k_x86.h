/* row1k_x86.c: the K-quants' one-row products from the split activations (x86). */
#ifndef LP_ROW1K_X86_H
#define LP_ROW1K_X86_H

#include "quants.h"

/* Row r of xr (its qh / ql kept: lp_xrows_split) against one weight row of nsb super-blocks;
 * pf > 0: each block's bytes pf further on are prefetched as it computes (0: none). */
float lp_row1_k45_split(int type, const uint8_t *row, int64_t nsb, const lp_xrows *xr, int64_t r, int64_t pf);
/* ... two weight rows w0, w1 of Q4_K / Q5_K: y[0], y[1] */
void lp_row1x2_k45_split(int type, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr, int64_t r, int64_t pf,
                         float *y);
float lp_row1_q6_k_split(const uint8_t *row, int64_t nsb, const lp_xrows *xr, int64_t r, int64_t pf);

#endif
