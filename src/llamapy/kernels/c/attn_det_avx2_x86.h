/* attn_det_avx2_x86.c: --deterministic's attention of one query row's head group over an f16
 * cache on 256-bit vectors (the AVX2 level; attn_det_x86.c's lp_attn_group_det calls it there). */
#ifndef LP_ATTN_DET_AVX2_X86_H
#define LP_ATTN_DET_AVX2_X86_H

#include "lp.h"

#if defined(LP_AVX2) && !defined(LP_AVX512)
/* attn_det_x86.h's lp_attn_group_det at the AVX2 level, its own order; 0 where d_k is not a
 * multiple of 8 or d_v of 32. */
int lp_attn_group_det256(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                         int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                         float *o, float *ms);
#endif

#endif
