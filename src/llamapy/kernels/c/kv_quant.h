/* kv_quant.c: rows of the KV cache stored in its storage types. */
#ifndef LP_KV_QUANT_H
#define LP_KV_QUANT_H

#include "quants.h"

/* The KV cache's storage types (LP_F16, and ggml's blocks of 32: LP_Q8_0, LP_Q4_0,
 * LP_Q4_1, LP_Q5_0, LP_Q5_1): a row of n values stored (ggml's quantize_row_*_ref; read back by
 * lp_row_to_f32); lp_kv_row_bytes: its bytes. */
int lp_kv_type_ok(int type);
/* K and V of these types with heads of d_k / d_v values: what the attention reads (a block-typed
 * head whole blocks of 32; kernels/types.py c_kv_types is the same rule) */
int lp_kv_types_ok(int tk, int tv, int64_t d_k, int64_t d_v);
static inline int64_t lp_kv_row_bytes(int type, int64_t n) { return type == LP_F16 ? 2 * n : lp_row_bytes(type, n); }
void lp_kv_store(int type, void *dst, const float *x, int64_t n);

#endif
