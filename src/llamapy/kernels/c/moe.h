/* moe.c: one row's mixture-of-experts FFN, for a caller's own parallel region (layers.c). */
#ifndef LP_MOE_H
#define LP_MOE_H

#include <stddef.h>
#include <stdint.h>

#define LP_MOE_MAX_K 64

/* One layer's experts: the router (F32 [n_expert, n_embd]), expert 0's gate, up and down blocks
 * with the bytes from one expert's matrix to the next, their types. */
typedef struct {
    const uint8_t *gate_inp, *wg, *wu, *wd;
    int64_t n_expert, k, tg, tu, td, sg, su, sd, n_embd, n_ff;
} lp_moe;

size_t lp_moe_own_bytes(const lp_moe *m);
size_t lp_moe_shared_floats(const lp_moe *m);
void lp_moe_row_for(const lp_moe *m, const float *x, const float *norm, float eps, float *y, float *shared, char *own,
                    int64_t *sel, float *wsel);

#endif
