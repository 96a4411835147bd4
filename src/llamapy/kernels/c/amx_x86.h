/* amx_x86.c: prompt-sized products on AMX tiles (the AVX-512 level, where the CPU has AMX-INT8). */
#ifndef LP_AMX_X86_H
#define LP_AMX_X86_H

#include "mm.h"

/* Prompt-sized products on AMX tiles, the lanes' sums bit for bit (LP_AMX builds;
 * elsewhere lp_amx_on is 0) */
int lp_amx_on(void);
int lp_amx_set(int on);
#if defined(LP_AMX)
void lp_amx_split_row(const int16_t *q, int64_t n_in, int8_t *hi, int8_t *lo);
size_t lp_amx_scratch_bytes(int64_t n_in);
void lp_amx_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xprep *xp, float *y,
                  int64_t ldy, int accumulate, void *scratch);
#endif

#endif
