/* det8_x86.c: deterministic mode's products of Q4_1 at the AVX-512 level with int8 activations
 * (vpdpbusd: 64 products an instruction, twice vpdpwssd's), one row or many, the same bits. */
#ifndef LP_DET8_X86_H
#define LP_DET8_X86_H

#include "lp.h"

/* Activation rows quantized to int8 per block of 32 (ggml's Q8_1 form), and from 2 rows on
 * also laid out in lanes: lane r of group g is row 16 g + r (rows past n: zeros). */
typedef struct {
    int64_t n_in, n, n_grp; /* row length, rows, groups of 16 rows (0 for one row) */
    int8_t *q;              /* [n, n_in] x / d rounded to nearest even, |q| <= 127 */
    float *d, *sum;         /* [n, n_in / 32] max |x| / 127; d * the exact integer sum of the block's q */
    int32_t *lq;            /* [n_grp, n_in / 4, 16] lane r: the row's 4 int8 of quad k */
    float *ld, *lsum;       /* [n_grp, n_in / 32, 16] the rows' d and sum per block */
} lp_x8;

/* Does det8 take this type (at this ISA level)?  Q4_1 at AVX-512; otherwise 0. */
int lp_det8_covers(int type);
size_t lp_x8_bytes(int64_t n_in, int64_t n);
lp_x8 lp_x8_at(void *buf, int64_t n_in, int64_t n);
void lp_x8_row(const float *x, const lp_x8 *p, int64_t r);  /* row r quantized (x: its n_in floats) */
void lp_x8_lanes_block(const lp_x8 *p, int64_t b);         /* block b of every row into the lanes */
lp_x8 lp_x8_slice(const lp_x8 *p, int64_t r0, int64_t n);  /* rows r0 .. r0 + n (r0 a multiple of 16) */
size_t lp_det8_scratch_bytes(int64_t n_in);
/* y[r, o] (+)= x_r . W_o for outputs o0 .. o1 and every row of p, each element one sequence:
 * per block of 32 in order, acc = fmaf((float)isum, d_w * d_x, acc); acc = fmaf(sum_x, m_w, acc).
 * o1 - o0 <= 16 (LP_MM_CHUNK). */
void lp_det8_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                   int64_t ldy, int accumulate, void *scratch);

#endif
