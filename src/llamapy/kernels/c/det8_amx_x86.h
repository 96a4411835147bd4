/* det8_amx_x86.c: deterministic mode's prompt-sized products of det8's types (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0) on AMX's int8 tiles, det8_x86.c's bits (the AVX-512 level with AMX-INT8). */
#ifndef LP_DET8_AMX_X86_H
#define LP_DET8_AMX_X86_H

#include "det8_x86.h"

#if defined(LP_AMX)
size_t lp_det8_amx_scratch_bytes(int64_t n_in);
/* y[r, o] (+)= x_r . W_o for outputs o0 .. o1 (at most 16) and every row of p (its q rows padded
 * to a multiple of 16, lp_x8_at), each element det8's sequence (lp_det8_chunk's contract). */
void lp_det8_amx_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *p, float *y, int64_t ldy,
                       int accumulate, void *scratch);
#endif

#endif
