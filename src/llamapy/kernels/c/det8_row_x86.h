/* det8_row_x86.c: det8's one-row products (p->n == 1), 8 outputs at once, the bits of
 * lp_det8_chunk's order. */
#ifndef LP_DET8_ROW_X86_H
#define LP_DET8_ROW_X86_H

#include "det8_x86.h"

void lp_det8_row(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                 int accumulate);
/* The same for nx (2..4) rows of p (rows 0 .. nx - 1; Q4_0 / Q4_1 / Q5_0 / Q5_1): each block of 8
 * weight rows decoded once, each row's outputs the bits lp_det8_row gives it alone; y rows ldy apart. */
void lp_det8_rows(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, int nx, float *y,
                  int64_t ldy, int accumulate);

#endif
