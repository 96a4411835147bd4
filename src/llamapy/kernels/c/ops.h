/* ops.c: the row operations around the products (norms, GLUs, RoPE) and the attention,
 * used by layers.c and api.c. */
#ifndef LP_OPS_H
#define LP_OPS_H

#include "lp.h"

void lp_rms_norm_row(const float *x, const float *w, int64_t n, float eps, float *out);
void lp_swiglu_row(const float *g, const float *u, int64_t n_ff, float *out);
void lp_geglu_row(const float *g, const float *u, int64_t n_ff, float *out);
void lp_rope_row(float *x, int64_t n_head, int64_t d, int64_t n_rot, const float *c, const float *s, int neox);
void lp_store_f16(uint16_t *dst, const float *x, int64_t n);
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
