/* det16_row_x86.c: det8's one-row products (p->n == 1) of the 32-element types at the AVX-512
 * level, 16 outputs at once in zmm registers, the bits of lp_det8_chunk's order. */
#ifndef LP_DET16_ROW_X86_H
#define LP_DET16_ROW_X86_H

#include "det8_x86.h"

/* y[o] (+)= x . W_o for o0 .. o1 (o1 - o0 <= 16: LP_MM_CHUNK; more is walked 16 at a time), p one
 * row; the sequence of det8_x86.h's lp_det8_chunk.  A no-op below the AVX-512 level. */
void lp_det16_row(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                  int accumulate);

#endif
