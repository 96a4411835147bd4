/* amxk_x86.c: the prompt-sized products of Q4_K / Q5_K / Q6_K on AMX tiles, a super-block (256
 * values) between float steps (the AVX-512 level, where the CPU has AMX-INT8). */
#ifndef LP_AMXK_X86_H
#define LP_AMXK_X86_H

#include "mm.h"

/* 1: Q4_K / Q5_K / Q6_K prompts take these products (the default where AMX is on), 0: amx_x86.c's
 * (the lanes' sums bit for bit), an A/B switch; LLAMAPY_AMXK=0 at load. */
int lp_amxk_set(int on);
/* Does a product of this type and row length take them (AMX on; any row count)? */
int lp_amxk_covers(int type, int64_t n_in);
#if defined(LP_AMX)
#define LP_AMXK_QMAX 127.0f /* |xq| bound: ggml's Q8_K */
/* Where value k of activation row r lies in xhi: per 16-row group, per 64 values, the 16 rows'
 * 64 bytes side by side (one AMX tile, 1 KB). */
#define LP_AMXK_AT(n_in, r, k) ((r) / 16 * 16 * (n_in) + (k) / 64 * 1024 + (r) % 16 * 64 + (k) % 64)
/* Row r of x [n, n_in] (n_in a multiple of 256) into xp: per super-block s = max |x| /
 * LP_AMXK_QMAX (xp->xr.s[r (n_in / 256) + B]), xq = x / s rounded to nearest even, int8 (xhi at
 * LP_AMXK_AT; xlo unused), and the float sum of x per block of 32 (xp->xr.sum32[r nb + b]). */
void lp_amxk_prep_row(const lp_xprep *xp, int64_t r);
size_t lp_amxk_scratch_bytes(int64_t n_in);
/* Output rows o0..o1 (at most LP_AMX_ROWS) of y (+)= x W^T for xp prepared by lp_amxk_prep_row. */
void lp_amxk_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xprep *xp, float *y,
                   int64_t ldy, int accumulate, void *scratch);
#endif

#endif
