/* det_kz_x86.c: --deterministic's Q4_K / Q6_K products at the AVX-512 VNNI level without AMX: a
 * row without an outlier block (q8on: lp_prepare_q8k_row's rule on the row's own values; a SwiGLU
 * row always, lp_det_kz_force, as the default and llama.cpp round them) in q8kz_x86.c's order at
 * every row count, any other row in the int16 lanes' (rows_det_x86.c kz_chunk).
 *
 * q8kz's order (lp_q8kz_rows, per (row, output)): the row in ggml's Q8_K (one scale per 256), per
 * super-block four exact int32 sums of the sub-blocks' scaled products (Q4_K: and of the minimums'
 * bsums), each a float step on its own accumulator (Q4_K: (is d - ms dmin) d8, Q6_K: (is - 32 c) d
 * d8, fused multiply-adds in a fixed order), the four added at the end.  A weight row is an int32
 * lane of its own and an activation row its own accumulators, so neither the other weight rows of a
 * pass nor the other rows change a bit: one row (a decode), 2-16 (a batched decode, a speculative
 * verification) and a prompt's 512 give each (row, output) the same bits -- the default's own
 * 16-127-row sums (mm_q8kz.inc; its one row, row1q8k_x86.c, sums in another order).  Against the
 * int16 lanes alone, -t 1 CPU time, Zen 5, 2048 x 8192: Q4_K 1 row 612 -> 409 us, 4 rows 1725 ->
 * 631, 512 rows 71.8 -> ~47 ms; the Llama 3.2 1B shape's decode step 138 -> 43 ms. */
#ifndef LP_DET_KZ_X86_H
#define LP_DET_KZ_X86_H

#include <stddef.h>
#include <stdint.h>

#include "mm.h"
#include "quants.h"
#include "q8kz_x86.h"

#if defined(LP_Q8KZ) && !defined(LP_AMX)
#define LP_DET_KZ 1 /* (AMX builds keep the int16 lanes' order: amx_x86.c's tiles give its bits from 128 rows) */
#endif

/* Does --deterministic's product of this type take this order here? */
int lp_det_kz_type(int type);
/* Bytes of n rows of n_in in Q8_K (0 where LP_DET_KZ is not built) and their layout into xr's
 * q8, d8, bs8, q8on from buf (which has lp_det_kz_bytes free); xr's Q8_K fields left as they are
 * where it has them already (lp_xrows_at: lp_xrows_q8k's row counts). */
size_t lp_det_kz_bytes(int64_t n_in, int64_t n);
void lp_det_kz_at(lp_xrows *xr, void *buf);
/* Output rows o0..o1 of w (n_out rows of n_in, type lp_det_kz_type) against those of xr's n rows
 * with q8on set, in Q8_K: y[r * ldy + o] (accumulate: +=); the other rows' y untouched. */
void lp_det_kz_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xrows *xr,
                     int64_t n, float *y, int64_t ldy, int accumulate);

/* Row r of dx (its forms prepared) read in Q8_K whatever its largest value: a SwiGLU row, as the
 * default rounds them (layers.c prep_ff_row); a property of the product, never of the batch. */
void lp_det_kz_force(const lp_xprep *dx, int64_t r);

#endif
