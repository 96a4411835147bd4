/* unpack_x86.c: weight rows decoded straight from their blocks on x86 (256-bit vectors), as
 * float32 (lp_row_to_f32_fast: lp_row_to_f32's fast path) and as the int16 rows the lanes read;
 * each returns 0 where the type (or the build) has no such path, and the caller takes the
 * canonical form (quants.h). */
#ifndef LP_UNPACK_X86_H
#define LP_UNPACK_X86_H

#include "lp.h"

int lp_row_to_f32_fast(int type, const uint8_t *row, int64_t n_in, float *out);
#if defined(LP_AVX2) || defined(LP_AVX512)
/* A row as int16 values (the canonical q) with d16 and m16 (lanes_x86.h's weight rows). */
int lp_unpack_row16(int type, const uint8_t *row, int64_t n_in, int16_t *q16, float *d16, float *m16);
/* Q4_K / Q5_K / Q6_K rows as bytes q + off (q8mm_x86.c's panels; each value's q + off in 0..255),
 * d16 and m16 as lp_unpack_row16's; 0 for the other types. */
int lp_unpack_row8(int type, const uint8_t *row, int64_t n_in, int off, uint8_t *u8, float *d16, float *m16);
#endif
#if defined(LP_AVX512)
/* Rows a and b of a 32-element block type straight into lp_twin_pair's ab and dm; 0
 * for the other types. */
int lp_unpack_pair16(int type, const uint8_t *a, const uint8_t *b, int64_t n_in, int32_t *ab, float *dm);
#endif

#endif
