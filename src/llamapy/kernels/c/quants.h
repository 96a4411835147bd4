/* quants.c: the block types' sizes, the canonical form of a weight row (lp.h) and the
 * activation rows of the integer products (lp_xrows), and the conversions into them. */
#ifndef LP_QUANTS_H
#define LP_QUANTS_H

#include "lp.h"

/* Elements per block and bytes per block of a type; 0 bytes: not a type of these kernels. */
int lp_block_elems(int type);
int lp_block_bytes(int type);
int lp_has_min(int type);     /* w = d q + m with a real m (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) */
int lp_g16(int type);         /* a scale per 16-group (Q2_K, Q3_K, Q6_K), not per block of 32 */
int lp_is_float(int type);    /* F32, F16, BF16: no blocks, products in fp32 */
int64_t lp_row_bytes(int type, int64_t n_in);

/* One output row in canonical form (see the top of lp.h). */
typedef struct {
    int8_t *q;    /* [n_in] */
    float *d16;   /* [n_in / 16] */
    float *m16;   /* [n_in / 16], all zero for types without a minimum */
} lp_wrow;

/* Few activation rows prepared for the integer products (lp_prepare_x). */
typedef struct {
    int64_t n_in, n;  /* row length, rows */
    int16_t *q;       /* [n, n_in] x / s, rounded to nearest even */
    float *s;         /* [n, n_in / 32] max |x| / LP_XQ_MAX per block of 32 */
    float *sum16;     /* [n, n_in / 16] s * the integer sum of q per 16 */
    float *sum32;     /* [n, n_in / 32] s * the integer sum of q per 32 */
    int8_t *qh, *ql;  /* q = 256 qh + ql, [n, n_in] each (lp_xrows_split); else NULL */
    int32_t *isum16;  /* [n, n_in / 16] the integer sum of q per 16 where qh is kept; else NULL */
    int8_t *q8;       /* [n, n_in] ggml's Q8_K values (lp_xrows_q8k, row1q8k_x86.c); else NULL */
    float *d8;        /* [n, n_in / 256] their scales */
    int16_t *bs8;     /* [n, n_in / 16] their sums per 16 */
    uint8_t *q8on;    /* [n] 1: row r's Q8_K form is read (lp_prepare_q8k_row: no outlier block) */
} lp_xrows;

/* Are the rows of an n-row product also kept split (qh, ql)?  Arm's dotprod: always (its
 * products read them); x86: up to LP_F32_ROWS - 1 rows, whose K-quant products (row1k_x86.c)
 * multiply the split bytes with vpdpbusd / vpmaddubsw. */
int lp_xrows_split(int64_t n);
/* ... and also as Q8_K (q8, d8, bs8)?  x86 without VNNI (LP_Q8K), up to LP_Q8K_ROWS - 1 rows:
 * its Q4_K / Q6_K products read them (row1q8k_x86.c; from LP_F32_ROWS rows mm.c q8k_chunk), as
 * llama.cpp's AVX2 build does; x86 with VNNI (LP_Q8K_FEW) up to LP_F32_ROWS - 1 rows,
 * where lp_cpu_q8k_few (not AMD Zen 4). */
int lp_xrows_q8k(int64_t n);

size_t lp_wrow_bytes(int64_t n_in);
lp_wrow lp_wrow_at(void *buf, int64_t n_in);
void lp_unpack_row(int type, const uint8_t *row, int64_t n_in, lp_wrow w);
void lp_row_to_f32(int type, const uint8_t *row, int64_t n_in, float *out, lp_wrow scratch);
size_t lp_xrows_bytes(int64_t n_in, int64_t n);
lp_xrows lp_xrows_at(void *buf, int64_t n_in, int64_t n);
void lp_prepare_x_row(const float *x, lp_xrows xr, int64_t r);

#endif
