/* amxw_x86.c: few-row products on AMX tiles with the weight rows as the tiles' A operand (the
 * MoE experts' rows, moe_rows.c), the lanes' sums bit for bit. */
#ifndef LP_AMXW_X86_H
#define LP_AMXW_X86_H

#include "lanes_x86.h"

#if defined(LP_AMX)
/* The lanes' pairs (l->q, filled: lp_xlanes_fill) turned in place into AMX's B tiles: per group
 * of 16 rows and per 4 values k..k+3, 64 bytes of the 16 rows' int8 hi, then 64 of their lo
 * (xq = 256 hi + lo); l's scales and sums stay as they were. */
void lp_amxw_lanes(const lp_xlanes *l);
/* Output rows o0..o1 (at most 16) of y (+)= x W^T for x's n rows in l (lp_amxw_lanes), in a
 * thread's lp_amx_scratch_bytes(n_in): the lanes_chunk's outputs bit for bit. */
void lp_amxw_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xlanes *l, int64_t n,
                   float *y, int64_t ldy, int accumulate, void *scratch);
#endif

#endif
