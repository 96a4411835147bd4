/* row1z_x86.c: the 32-element block types against one to four int16 activation rows (x86:
 * 512-bit vectors at the AVX-512 level, 256-bit at AVX2). */
#ifndef LP_ROW1Z_X86_H
#define LP_ROW1Z_X86_H

#include "quants.h"

/* Does this level have the path for this type (the 32-element types on x86)? */
int lp_row1z_covers(int type);
/* nw (1 or 4) consecutive weight rows from w0 (rb bytes each, n_in wide) against activation
 * row r of xr: y[0..nw); pf (0: none): the distance in bytes at which each block's line is
 * prefetched as it computes (row1_x86.h lp_row1_prefetches).  0 where the type (or the level)
 * has no such path. */
int lp_row1z(int type, int nw, const uint8_t *w0, int64_t rb, int64_t n_in, const lp_xrows *xr, int64_t r, int64_t pf,
             float *y);
/* One weight row against activation rows r0..r0+nx-1 (nx 2..4), each row's sums as lp_row1z's
 * (the same bits as that row alone): y[0..nx).  0 where not available. */
int lp_row1z_rows(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r0, int nx, float *y);

#endif
