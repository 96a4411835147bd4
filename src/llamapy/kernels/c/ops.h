/* ops.c: the row operations around the products (norms, GLUs, RoPE, f16 stores), used by
 * layers.c, api.c and the MoE rows (the attention: attn.h). */
#ifndef LP_OPS_H
#define LP_OPS_H

#include "lp.h"

void lp_rms_norm_row(const float *x, const float *w, int64_t n, float eps, float *out);
void lp_swiglu_row(const float *g, const float *u, int64_t n_ff, float *out);
void lp_geglu_row(const float *g, const float *u, int64_t n_ff, float *out);
void lp_rope_row(float *x, int64_t n_head, int64_t d, int64_t n_rot, const float *c, const float *s, int neox);
void lp_store_f16(uint16_t *dst, const float *x, int64_t n);
#endif
