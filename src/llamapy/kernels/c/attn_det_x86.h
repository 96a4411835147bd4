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

#endif
