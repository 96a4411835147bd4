/* mm_det_x86.c: deterministic mode's one-call products (x86): the types and row lengths
 * rows_det_x86.c covers, and lp_mm_det (the rows prepared, then lp_mm_det_for, in its own
 * parallel region). */
#ifndef LP_MM_DET_X86_H
#define LP_MM_DET_X86_H

#include "mm.h"

int lp_mm_det_covers(int type, int64_t n_in);
int lp_mm_det(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
              int64_t ldy, int accumulate);

#endif
