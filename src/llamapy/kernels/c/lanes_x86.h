/* lanes_x86.c: x86's integer products of several activation rows in vector lanes (LP_LANES:
 * AVX2 and AVX-512), and at AVX-512 the twin lanes (LP_TWIN). */
#ifndef LP_LANES_X86_H
#define LP_LANES_X86_H

#include "quants.h"

/* Activation rows laid out "rows in lanes" for x86's integer products of LP_F32_ROWS rows or
 * more (lanes_x86.c; mm.c decides which): per group of LP_NL rows, lane r of each vector is row
 * r's (the twin lanes: row r in lanes 2r and 2r + 1). */
typedef struct {
    int64_t n_in, n_grp; /* row length, groups of LP_NL rows */
    int32_t *q;          /* [n_grp, n_in / 2, LP_NL] each lane's pair of int16 (xrows' q) */
    float *s, *sum32;    /* [n_grp, n_in / 32, LP_NL] */
    float *sum16;        /* [n_grp, n_in / 16, LP_NL] */
} lp_xlanes;
#if defined(LP_AVX2) || defined(LP_AVX512)
#define LP_LANES 1
#if defined(LP_AVX512)
#define LP_NL 16 /* rows per lane group: a zmm of int32 */
#define LP_LANES_NG3 1 /* lp_lanes_tile takes 3 groups (12 integer and 12 float accumulators in 32 zmm) */
#else
#define LP_NL 8
#endif
/* the layout's size, place and fill: lanes_fill_x86.c */
size_t lp_xlanes_bytes(int64_t n_in, int64_t n);
lp_xlanes lp_xlanes_at(void *buf, int64_t n_in, int64_t n);
void lp_xlanes_fill(const lp_xrows *xr, int64_t n, lp_xlanes l, int64_t b, int per); /* per: lanes a row (1, 2: twin) */
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
