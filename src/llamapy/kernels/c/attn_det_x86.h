/* attn_det_x86.c: --deterministic's attention of one query row's head group over an f16 cache
 * on 512-bit vectors (the AVX-512 level); attn_det_avx2_x86.c: its twin on 256-bit vectors (the
 * AVX2 level, its own order). */
#ifndef LP_ATTN_DET_X86_H
#define LP_ATTN_DET_X86_H

#include "lp.h"

/* As lp_attn_group_x86 (f16 K and V rows): o = softmax(q k / scale + mask) v per head, ms
 * (NULL, or per head its max and sum) for the chunks' merge; p: hpt * nc floats of scratch.
 * Returns 0 where it does not apply (not x86; AVX-512: d_k not a multiple of 16, d_v of 64;
 * AVX2: d_k not a multiple of 8, d_v of 32). */
int lp_attn_group_det(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                      int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                      float *o, float *ms);

/* One query row's task for lp_attn_pair_det: q (its group's hpt heads, d_k apart), mi (its mask row), cells (ALL
 * its visible cells) and its chunk [c0, c1) of them; o, ms as lp_attn_group_det's. */
typedef struct {
    const float *q, *mi;
    const int64_t *cells;
    int64_t c0, c1;
    float *o, *ms;
} lp_attn_det_row;

#define LP_ATTN_PAIR_MIN 8 /* shared cells under which a pair's rows run alone */

/* Two rows' lp_attn_group_det over one KV head's cache, each row's o and ms bit for bit what it gets alone: the
 * cells both see (cells[c] equal at the same place c of both lists, inside both chunks) read and converted once for
 * both.  p: 2 hpt x (the longer chunk) floats.  Returns 0 where lp_attn_group_det would, or there is no pair form
 * (the AVX2 and scalar levels; more than 3 heads a group): then run each row alone. */
int lp_attn_pair_det(const lp_attn_det_row *a, const lp_attn_det_row *b, int64_t hpt, int64_t d_k, int64_t d_v,
                     const uint16_t *k, const uint16_t *v, int64_t ldk, int64_t ldv, float scale, float *p);

#endif
