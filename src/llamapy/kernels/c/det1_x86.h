/* det1_x86.c: deterministic mode's one-row product (x86), in the lanes' order (lanes_x86.c). */
#ifndef LP_DET1_X86_H
#define LP_DET1_X86_H

#include "quants.h"

#define LP_DET1_W 8 /* outputs computed at once: one vector of per-output sums */
size_t lp_det1_scratch_bytes(int64_t n_in);
/* Output rows o0..o1 of W (type, rows of n_in) against activation row 0 of xr: y[o] (+)= ... */
void lp_det1_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xrows *xr,
                   float *y, int accumulate, void *scratch);

#endif
