/* lanes8_x86.c: the AVX2 level's (no VNNI) int8 lanes for the 32-element types of 4 and 5 bits
 * (Q4_0, Q4_1, Q5_0, Q5_1) where the int16 lanes (lanes_x86.h) took them: LP_F32_ROWS..8 and
 * 16 or more rows (mm.c lanes8_takes). */
#ifndef LP_LANES8_X86_H
#define LP_LANES8_X86_H

#include "lanes_x86.h"

/* Activation rows in Q8_0 form (ggml's quantize_row_q8_0: one scale per 32, max |x| / 127, the
 * values rounded to nearest even; the scale kept in fp32, not ggml's fp16) laid out "rows in
 * lanes": per group of LP_NL rows, lane r of each vector is row r's. */
typedef struct {
    int64_t n_in, n_grp; /* row length, groups of LP_NL rows (0: not prepared) */
    int32_t *q;          /* [n_grp, n_in / 4, LP_NL] each lane's 4 int8 values (elements 4k .. 4k + 3) */
    float *s;            /* [n_grp, n_in / 32, LP_NL] the block's scale */
    int32_t *isum;       /* [n_grp, n_in / 32, LP_NL] the block's sum of int8 values (the weights' offset) */
    float *sum;          /* [n_grp, n_in / 32, LP_NL] s * isum (Q4_1 / Q5_1's minimum: ggml's Q8_1 s) */
} lp_xlanes8;

/* Does the int8 lane product take this type (where the level has it)?  The one rule: mm.c's choice, and
 * which inputs lp_mm and layers.c lay out in int8 lanes at all. */
static inline int lp_lanes8_type(int64_t type) {
    return type == LP_Q4_0 || type == LP_Q4_1 || type == LP_Q5_0 || type == LP_Q5_1;
}

#if defined(LP_AVX2) && !defined(LP_AVX512) && !defined(LP_AVXVNNI)
#define LP_LANES8 1
size_t lp_xlanes8_bytes(int64_t n_in, int64_t n);
lp_xlanes8 lp_xlanes8_at(void *buf, int64_t n_in, int64_t n);
/* Block b (32 elements) of the n float rows x [n, n_in] rounded and laid out; lanes past the last
 * row hold zeros. */
void lp_xlanes8_fill(const float *x, int64_t n, lp_xlanes8 l, int64_t b);
/* A weight row of such a type as unsigned bytes (q + 8 for Q4_0, q + 16 for Q5_0; Q4_1 / Q5_1
 * their q) in element order, its d and m per block of 32: u8 [n_in], d, m [n_in / 32]. */
void lp_unpack_row8_32(int type, const uint8_t *row, int64_t n_in, uint8_t *u8, float *d, float *m);
/* nw (1..4) such weight rows u8[j], d[j], m[j] against the LP_NL rows of each of ng (1, 2) lane
 * groups from g0: activation row LP_NL i + lane's outputs at y[(LP_NL i + lane) ldy + j], j < 4
 * (the columns past nw hold zeros), as lanes_x86.h lp_lanes_tile. */
void lp_lanes8_tile(int type, int ng, int nw, const uint8_t *const *u8, const float *const *d, const float *const *m,
                    const lp_xlanes8 *l, int64_t g0, const char *pf, int64_t pf_lines, float *y, int64_t ldy);
#endif

#endif
