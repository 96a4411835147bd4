/* dot.c: the products of one weight row (canonical form, or float rows) against activation rows. */
#ifndef LP_DOT_H
#define LP_DOT_H

#include "quants.h"

/* w . x_r for row r of xr (integer products), and the fp32 products of nw <= LP_TW
 * float rows w[j] against n <= LP_TX rows of x (row stride ldx) into y[LP_TX j + i]. */
float lp_dot_row(int g16, int has_min, lp_wrow w, const lp_xrows *xr, int64_t r);
enum { LP_WF32 = 0, LP_WF16 = 1, LP_WBF16 = 2 }; /* the float kinds of weight rows lp_dot_tile_f32 reads */
void lp_dot_tile_f32(int kind, const void *const *w, int nw, int64_t n_in, const float *x, int64_t ldx, int n,
                     float *y);
#define LP_FROWS 8 /* f16 / bf16 weights against at most this many rows: one weight row at a time (lp_dot_float_rows) */
#define LP_FROWS_GROUPED 16 /* ... and up to this many in groups (mm.c float_row_groups) */
/* ... and from LP_F32_ROWS rows two weight rows at a time where their 2 n accumulators, the two
 * weight vectors and an activation fit the vector registers (32; 16 at AVX2) */
#if defined(LP_AVX2) && !defined(LP_AVX512)
#define LP_FROWS2 6
#else
#define LP_FROWS2 LP_FROWS
#endif
void lp_dot_float_rows(int kind, const void *w, const void *w1, const float *x, int64_t ldx, int64_t n_in, int n,
                       float *y);
#if defined(LP_BF16)
/* ... and in bf16 on a CPU with AVX512-BF16 (rows as bf16, n_in a multiple of 32): nw <= 3
 * weight rows, n <= 4 activation rows, y[LP_TX j + i] */
void lp_dot_tile_bf16(const uint16_t *const *w, int nw, int64_t n_in, const uint16_t *x, int64_t ldx, int n, float *y);
void lp_to_bf16(const float *x, int64_t n, uint16_t *out);
#endif
/* Products of few rows of this type take bf16 on this CPU (its coarse types, kernels/types.py
 * BF16_GEMM_TYPES: Q4_0, Q4_1, Q2_K, Q3_K, BF16)? */
static inline int lp_bf16_rows(int type, int64_t n_in) {
#if defined(LP_BF16)
    return n_in % 32 == 0 && (type == LP_Q4_0 || type == LP_Q4_1 || type == LP_Q2_K || type == LP_Q3_K || type == LP_BF16_T);
#else
    (void)type, (void)n_in;
    return 0;
#endif
}

#endif
