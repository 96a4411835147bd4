/* attn_merge.c: how attn.c's attention merges a row's chunks (each its softmax's max and sum) and takes a
 * sink's share. */
#ifndef LP_ATTN_MERGE_H
#define LP_ATTN_MERGE_H

#include "lp.h"

void lp_attn_merge(const float *o, int64_t step, const float *ms, int64_t mstep, int64_t n_chunk, int64_t d_v, float sink,
                   float *out);
void lp_attn_sink_scale(float *o, int64_t hpt, int64_t d_v, const float *ms, const float *sinks);

#endif
