/* q8p_x86.c: prompt-sized (LP_Q8MM_ROWS+) Q4_K / Q5_K / Q6_K products at the AVX2 level without
 * VNNI against activations in ggml's Q8_K (one scale per 256, sums per 16: lp_prepare_q8k_row),
 * on q8mm_x86.c's packed 8-row weight panel: llama.cpp's own AVX2 arithmetic, one float step per
 * super-block per tile where the int8 rows with a scale per 32 (q8mm_256.inc) took one per 32. */
#ifndef LP_Q8P_X86_H
#define LP_Q8P_X86_H

#include "quants.h"

#if defined(LP_AVX2) && !defined(LP_AVX512) && !defined(LP_AVXVNNI)
#define LP_Q8P 1
#endif
#define LP_Q8P_NP 8 /* weight rows a panel: q8mm_256.inc's Q8MM_NP */

/* Does lp_mm_q8 take this type's rows in Q8_K (the build, the type, the switch LLAMAPY_Q8P=0)? */
int lp_q8p_covers(int type);
/* The switch set (1 on, 0 off: every row in q8mm_256.inc's int8 rows); returns the last setting. */
int lp_q8p_set(int on);
/* Rows in ggml's Q8_K: q [n, n_in] int8, d [n, n_in / 256], bs16 [n, n_in / 16] (sums per 16),
 * bs32 [n, n_in / 32] (per 32), on [n] (1: no outlier block, lp_prepare_q8k_row's rule). */
typedef struct {
    int64_t n, n_in;
    int8_t *q;
    float *d;
    int16_t *bs16, *bs32;
    uint8_t *on;
} lp_q8p_x;
size_t lp_q8p_x_bytes(int64_t n_in, int64_t n);
lp_q8p_x lp_q8p_x_at(void *buf, int64_t n_in, int64_t n);
/* Row r of x [n_in] rounded to Q8_K; returns x->on[r]. */
int lp_q8p_row(lp_q8p_x *x, const float *xr, int64_t r);
/* A thread's room for two panels' integer scales. */
size_t lp_q8p_scratch_bytes(int64_t n_in);
/* Weight rows o .. o + nc (nc <= 16) of W (type, rows of n_in), their bytes packed by q8mm_x86.c in
 * panels of 8 (pq: rows o .. o + 8, pq2: rows o + 8 .. o + 16, read iff nc > 8; each [n_in / 4][8]
 * dwords, 4 values of a row each, q + 32 for Q6_K, q for Q4_K / Q5_K, rows past nc zero), against
 * x's rows rows[0 .. nr): y[rows[t] ldy + o + v] (+)= the product. */
void lp_q8p_panel(int type, const uint8_t *w, int64_t o, int nc, const uint32_t *pq, const uint32_t *pq2, const lp_q8p_x *x,
                  const int64_t *rows, int64_t nr, float *y, int64_t ldy, int accumulate, void *scratch);

#endif
