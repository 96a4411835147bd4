/* q8kz_x86.c: Q4_K / Q6_K products of a batched decode's 2 .. LP_DENSE_ROWS - 1 rows (a verification,
 * a few sequences) against ggml's Q8_K activations, on AVX-512 VNNI (the native level). */
#ifndef LP_Q8KZ_X86_H
#define LP_Q8KZ_X86_H

#include "quants.h"

#if defined(LP_AVX512) && defined(LP_VNNI)
#define LP_Q8KZ 1
#endif
#define LP_Q8KZ_Q4K 2 /* rows from which Q4_K's products take q8kz (mm.c q8kz_chunk; lp_q8kz_routes) */
#define LP_Q8KZ_Q6K 2 /* ... and Q6_K's */
#define LP_Q8KZ_FEW (LP_Q8KZ_Q4K < LP_Q8KZ_Q6K ? LP_Q8KZ_Q4K : LP_Q8KZ_Q6K) /* the fewest rows prepared as Q8_K here */

#define LP_Q8KZ_W 16  /* weight rows a pass (one per int32 lane) */

/* nw (1..LP_Q8KZ_W) weight rows w[0..nw) of Q4_K (type LP_Q4_K) or Q6_K (LP_Q6_K), nsb
 * super-blocks each, against the nr (<= LP_DENSE_ROWS) activation rows rows[0..nr) of xr's Q8_K
 * form (each with q8on set): y[LP_Q8KZ_W t + v] (v < nw; the rest written, not the product) the
 * product of weight row v and activation row rows[t], its integers per super-block exact (ggml's
 * Q8_K product up to fp32 order), each row's sum its own whatever the rows beside it.  pf: where
 * the next pass's rows lie, bytes past w[0] (the 16 rows' bytes contiguous; 0: no prefetch), their
 * lines asked for as these compute. */
void lp_q8kz_rows(int type, int nw, const uint8_t *const *w, int64_t nsb, int64_t pf, const lp_xrows *xr, const int64_t *rows,
                  int nr, float *y);

/* Do n-row products prepare and read the Q8_K form here (on: LP_Q8KZ built and switched on;
 * LP_Q8KZ_FEW .. LP_DENSE_ROWS - 1 rows, below LP_F32_ROWS only where lp_cpu_q8k_few)?  lp_q8kz_routes: does a product of this type and n rows
 * whose rows are prepared so take q8kz (mm.c; the one-row path stays row1q8k's)?
 * lp_q8kz_set(0|1) switches both, returning the previous setting (tests: the int16 paths' sums). */
int lp_q8kz_takes(int64_t n);
int lp_q8kz_routes(int type, int64_t n);
int lp_q8kz_set(int on);

#endif
