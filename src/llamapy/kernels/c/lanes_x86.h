/* lanes_x86.c: x86's integer products of several activation rows in vector lanes (LP_LANES:
 * AVX2 and AVX-512), and at AVX-512 the twin lanes (LP_TWIN). */
#ifndef LP_LANES_X86_H
#define LP_LANES_X86_H

#include "lanes_fill_x86.h"

#if defined(LP_LANES)
#if defined(LP_AVX512)
#define LP_LANES_NG3 1 /* lp_lanes_tile takes 3 groups (12 integer and 12 float accumulators in 32 zmm) */
#endif
/* nw (1..4) weight rows (w16: their canonical q widened to int16, lp_widen_q; wr: their d16,
 * m16) against the LP_NL rows of each of ng (1, 2; 3 with LP_LANES_NG3) lane groups from g0, in rows: activation row
 * LP_NL i + lane's outputs at y[(LP_NL i + lane) ldy + j], j < 4 (four written whatever nw: the
 * columns past nw hold zeros).  raw (Q8_0 only; else NULL): the rows' blocks, rb bytes apart,
 * decoded into w16 and wr's d16 as the tile goes (LP_LANES_DEC). */
void lp_lanes_tile(int ng, int nw, int g16, int has_min, const uint8_t *raw, int64_t rb, const int16_t *const *w16,
                   const lp_wrow *wr, const lp_xlanes *l, int64_t g0, const char *pf, int64_t pf_lines, float *y,
                   int64_t ldy);
#if !defined(LP_AVX512)
#define LP_LANES_DEC 1 /* AVX2: Q8_0's rows decoded inside the lane tile (lp_lanes_tile's raw) */
#endif
void lp_widen_q(const int8_t *q, int64_t n_in, int16_t *out);
int lp_lanes_amd(void); /* an AMD CPU (lp_cpu_amd_family, asked once): mm_lanes.h lanes_tile_rows */
#endif
#if defined(LP_AVX512)
/* Twin lanes (lanes_x86.c): LP_F32_ROWS..LP_FEW_ROWS rows, each in two adjacent lanes of one
 * group, against weight rows paired by lp_twin_pair; np (1..4) pairs: y[16 j + 2 r + h]. */
#define LP_TWIN 1
void lp_twin_pair(const int16_t *a, const int16_t *b, const lp_wrow *wa, const lp_wrow *wb, int64_t n_in, int32_t *ab,
                  float *dm);
void lp_twin_tile(int np, int g16, int has_min, const int32_t *const *ab, const float *const *dm, const lp_xlanes *l,
                  const char *pf, int64_t pf_lines, float *y);
#endif

#endif
