/* q8k4_x86.c: Q4_K / Q6_K products of a batched decode's rows (LP_F32_ROWS .. LP_Q8K_ROWS - 1)
 * against ggml's Q8_K activations, four weight rows interleaved per vector (x86 AVX2, no VNNI). */
#ifndef LP_Q8K4_X86_H
#define LP_Q8K4_X86_H

#include "quants.h"

/* nw (1..4) weight rows w[0..nw) of Q4_K (type LP_Q4_K) or Q6_K (LP_Q6_K), nsb super-blocks each,
 * against the nr (<= LP_Q8K_ROWS) activation rows rows[0..nr) of xr's Q8_K form (each with q8on
 * set): y[v nr + t] the product of weight row v and activation row rows[t], its integers exact
 * (ggml's Q8_K product up to fp32 order). */
void lp_q8k4_rows(int type, int nw, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                  float *y);
/* ... and while it computes, the 4 nsb blocks from pf on (the next four weight rows: pf = w[0] + 4
 * row bytes) requested into L2 a super-block's share at a time (NULL: none): 16 activation rows
 * side by side keep a pass on four rows long enough that the hardware prefetchers lose the
 * stream, and mm.c's bulk prefetch at a pass's start asked for ~150 lines at once. */
void lp_q8k4_rows_pf(int type, int nw, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                     float *y, const uint8_t *pf);

#endif
