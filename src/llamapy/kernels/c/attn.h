/* attn.c: the attention of a ubatch's rows over the KV cache, used by layers.c and api.c. */
#ifndef LP_ATTN_H
#define LP_ATTN_H

#include "lp.h"

int64_t lp_attn_heads_per_task(int64_t n_head, int64_t n_head_kv);
int64_t lp_attn_chunks(int64_t n, int64_t n_head, int64_t n_head_kv, int64_t most, int n_threads);
int64_t lp_attn_part_floats(int64_t n, int64_t n_head, int64_t d_v, int64_t n_chunk);
int64_t lp_most_visible(const int64_t *ptr, int64_t n);
int64_t lp_attn_kv_floats(int64_t most, int64_t d_k, int64_t d_v);
void lp_attn_for(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k,
                 int64_t d_v, int tk, const void *k, int tv, const void *v, int64_t n_kv, const float *mask,
                 const int64_t *ptr, const int64_t *cells, float scale, float *out, int64_t ldo, int64_t hpt,
                 int64_t n_chunk, float *p, float *part, const int64_t *cell_off, float *kvf, const int64_t *row_chunks,
                 const float *sinks);
void lp_attn_det_for(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k,
                     int64_t d_v, int tk, const void *k, int tv, const void *v, int64_t n_kv, const float *mask,
                     const int64_t *ptr, const int64_t *cells, float scale, float *out, int64_t ldo, int64_t hpt,
                     int64_t n_chunk, float *p, float *part, const int64_t *cell_off, float *kvf, const int64_t *row_chunks);

#endif
