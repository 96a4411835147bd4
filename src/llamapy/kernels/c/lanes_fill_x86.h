/* lanes_fill_x86.c: the activation rows' lane layout of x86's int16 lanes (LP_LANES: AVX2 and
 * AVX-512; the products: lanes_x86.h): its size, its place in a buffer, and its fill. */
#ifndef LP_LANES_FILL_X86_H
#define LP_LANES_FILL_X86_H

#include "quants.h"

/* Activation rows laid out "rows in lanes" for x86's integer products of LP_F32_ROWS rows or
 * more (lanes_x86.c; mm.c decides which): per group of LP_NL rows, lane r of each vector is row
 * r's (the twin lanes: row r in lanes 2r and 2r + 1). */
typedef struct {
    int64_t n_in, n_grp; /* row length, groups of LP_NL rows */
    int32_t *q;          /* [n_grp, n_in / 2, LP_NL] each lane's pair of int16 (xrows' q) */
    float *s, *sum32;    /* [n_grp, n_in / 32, LP_NL] */
    float *sum16;        /* [n_grp, n_in / 16, LP_NL] */
} lp_xlanes;
#if defined(LP_AVX2) || defined(LP_AVX512)
#define LP_LANES 1
#if defined(LP_AVX512)
#define LP_NL 16 /* rows per lane group: a zmm of int32 */
#else
#define LP_NL 8
#endif
size_t lp_xlanes_bytes(int64_t n_in, int64_t n);
lp_xlanes lp_xlanes_at(void *buf, int64_t n_in, int64_t n);
void lp_xlanes_fill(const lp_xrows *xr, int64_t n, lp_xlanes l, int64_t b, int per); /* per: lanes a row (1, 2: twin) */
#endif

#endif
