/* amx_x86.c: prompt-sized products on AMX tiles (the AVX-512 level, where the CPU has AMX-INT8). */
#ifndef LP_AMX_X86_H
#define LP_AMX_X86_H

#include "mm.h"

/* Prompt-sized products on AMX tiles, the lanes' sums bit for bit (LP_AMX builds;
 * elsewhere lp_amx_on is 0) */
int lp_amx_on(void);
int lp_amx_set(int on);
#if defined(LP_AMX)
/* Where value k (a multiple of 32 for a block) of activation row r lies in xhi / xlo: per 16-row
 * group, per block of 32, the 16 rows' 32 bytes side by side (one AMX tile, 512 bytes). */
#define LP_AMX_AT(n_in, r, k) ((r) / 16 * 16 * (n_in) + (k) / 32 * 512 + (r) % 16 * 32 + (k) % 32)
void lp_amx_split_row(const int16_t *q, int64_t n_in, int64_t r, int8_t *xhi, int8_t *xlo);
#define LP_AMX_GROUPS 4                  /* groups of 16 weight rows a task (lp_amx_chunk) */
#define LP_AMX_ROWS (16 * LP_AMX_GROUPS) /* a task's output rows at most */
size_t lp_amx_scratch_bytes(int64_t n_in);
void lp_amx_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xprep *xp, float *y,
                  int64_t ldy, int accumulate, void *scratch);
#endif

#endif
