/* rows_det_x86.c: deterministic mode's multi-row products, each element the one-row product's. */
#ifndef LP_ROWS_DET_X86_H
#define LP_ROWS_DET_X86_H

#include "quants.h"

int lp_mm_det_covers(int type, int64_t n_in);
int lp_mm_det(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
              int64_t ldy, int accumulate);
/* For a caller's own parallel region (layers.c): the rows' forms in buf (lp_det_xrows_bytes),
 * prepared from x [n, n_in] by lp_det_prep_for (threads meet after), then the product. */
size_t lp_det_xrows_bytes(int64_t n_in, int64_t n);
lp_xrows lp_det_xrows_at(void *buf, int64_t n_in, int64_t n);
void lp_det_prep_for(const float *x, const lp_xrows *xr);
void lp_mm_det_for(int type, const uint8_t *w, int64_t n_out, const lp_xrows *xr, float *y, int64_t ldy, int accumulate);

#endif
