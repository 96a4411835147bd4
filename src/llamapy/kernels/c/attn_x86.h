/* attn_x86.c: the attention of one row's head group on x86 vectors (attn.c's inner loop). */
#ifndef LP_ATTN_X86_H
#define LP_ATTN_X86_H

#include "lp.h"

/* attn.c's attention of one row's head group, vectorized for x86 (K and V rows f16,
 * or f32 with f32 set); 0 where it does not apply (head sizes not multiples of 8 / 32, or not x86). */
int lp_attn_group_x86(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const void *k, const void *v, int64_t ldk,
                      int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p, float *o,
                      float *ms, int f32);

#endif
