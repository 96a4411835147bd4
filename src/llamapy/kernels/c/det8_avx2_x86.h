/* det8_avx2_x86.c: det8's products of two rows or more at the AVX2 level (no VNNI needed):
 * det8_x86.h's contract and order, the rows' int8 in 8-lane halves of lp_x8's 16-row groups. */
#ifndef LP_DET8_AVX2_X86_H
#define LP_DET8_AVX2_X86_H

#include "det8_x86.h"

#if defined(LP_AVX2) && !defined(LP_AVX512)
size_t lp_det8_scratch256_bytes(int64_t n_in);
/* y[r, o] (+)= x_r . W_o for outputs o0 .. o1 (at most 16) and every row of p (p->n >= 2, in lanes:
 * lp_x8_lanes_block), each element det8's sequence (lp_det8_chunk). */
void lp_det8_chunk256(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *p, float *y, int64_t ldy,
                      int accumulate, void *scratch);
/* One row (p->n == 1) of Q4_K / Q5_K / Q6_K, the sequence of the lanes above: y[o] (+)= x . W_o, o0 .. o1. */
void lp_det8_row256_k45(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                        int accumulate);
#endif

#endif
