/* Deterministic mode's prompt-sized products of det8's types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) on
 * AMX's int8 tiles, det8_x86.c's bits: per (row, output) and block of 32, in block order,
 *
 *   i   = the exact int32 sum of q_w q_x over the block      (one tdpbssd of K = 32: the tile's
 *         dot of a row's 32 int8 and a weight row's 32 signed q, exact as det8's vpdpbusd sums
 *         of (q_w + off) q_x less off qs are)
 *   acc = fmaf((float)i, d_w * d_x, acc)                     (d_w * d_x rounded once)
 *   acc = fmaf(sum_x, m_w, acc)                              (Q4_1 / Q5_1)
 *
 * so a row's outputs do not depend on which path (lanes, one row, tiles) its row count takes
 * (tests/test_deterministic_kernels.py: 128 / 143 / 530 rows, AMX on and off, against each row
 * alone).  A tile of K = 32 holds exactly one block, so no two blocks' integers meet.  Per 16
 * weight rows: their signed q as B tiles ([8 quads][16 rows][4]) and d, m per block once; then
 * per 16 activation rows (lp_x8's q, row-major, read as the A tile straight from it) each
 * block's tdpbssd and tile store, the next block's issued before this one's float step (two
 * C tiles in turn), the step in zmm registers: one per activation row holding the 16 weight
 * rows' outputs.  Taken from LP_DENSE_ROWS rows (rows_det_x86.c, lp_x8.tiles) where AMX is on. */
#include "det8_amx_x86.h"

#if defined(LP_AMX)
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tile_config;

/* The tiles (literal numbers: the intrinsics paste them into the instructions); even blocks
 * take C0 / A0 / B0, odd ones C1 / A1 / B1. */
#define T_C0 0 /* 16 activation rows x 16 weight rows, int32 */
#define T_C1 1
#define T_A0 2 /* 16 activation rows x 32 int8 (one block) */
#define T_A1 3
#define T_B0 4 /* 8 quads x 16 weight rows x 4 int8 */
#define T_B1 5

static void configure(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = T_C0; t <= T_C1; t++) c.rows[t] = 16, c.colsb[t] = 64;
    for (int t = T_A0; t <= T_A1; t++) c.rows[t] = 16, c.colsb[t] = 32;
    for (int t = T_B0; t <= T_B1; t++) c.rows[t] = 8, c.colsb[t] = 64;
    _tile_loadconfig(&c);
}

/* bt [nb][8][16][4] int8, dv and mv [nb][16] floats */
size_t lp_det8_amx_scratch_bytes(int64_t n_in) { return 16 * (size_t)n_in + 2 * (size_t)(n_in / 32) * 64 + 128; }

/* Weight rows o0..o1 (at most 16) of a type: bt's B tiles (row j's signed q = det8's bytes less
 * the offset, quad k of block b at bt + 512 b + 64 k + 4 j; rows past o1 zero), dv / mv the rows'
 * d and m (0 without a minimum) per block. */
LP_INLINE void weight_tiles(const int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t nb, int8_t *bt, float *dv,
                            float *mv) {
    const int bb = bytes32(type), has_min = type == LP_Q4_1 || type == LP_Q5_1;
    const __m256i at = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112), offv = _mm256_set1_epi8((char)lp_det8_offset(type));
    if (o1 - o0 < 16) memset(bt, 0, (size_t)nb * 512);
    for (int j = 0; j < 16; j++) {
        if (o0 + j >= o1) {
            for (int64_t b = 0; b < nb; b++) dv[16 * b + j] = mv[16 * b + j] = 0.0f;
            continue;
        }
        const uint8_t *row = w + (o0 + j) * bb * nb;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + bb * b;
            const __m256i q = _mm256_sub_epi8(lp_det8_bytes(type, blk), offv); /* Q8_0: back to its int8 (mod 256) */
            _mm256_i32scatter_epi32((int *)(bt + 512 * b) + j, at, q, 4);
            dv[16 * b + j] = lp_f16_to_f32(lp_rd16(blk)), mv[16 * b + j] = has_min ? lp_f16_to_f32(lp_rd16(blk + 2)) : 0.0f;
        }
    }
}

/* Block b's float step for 16 activation rows: c the stored int32 tile [16 rows][16 weight
 * rows], dx[m] / sx[m] row m's d and sum per block (rows past the product's end: its last row,
 * never stored).  Unrolled, so that acc stays in registers. */
LP_INLINE void step(const int has_min, const int32_t *c, const float *dv, const float *mv, const float *const *dx,
                    const float *const *sx, int64_t b, __m512 *acc) {
    const __m512 dw = _mm512_load_ps(dv + 16 * b), mw = _mm512_load_ps(mv + 16 * b);
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) {
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m)), _mm512_mul_ps(dw, _mm512_set1_ps(dx[m][b])),
                                 acc[m]);
        if (has_min) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(sx[m][b]), mw, acc[m]);
    }
}

LP_INLINE void chunk(const int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *p, float *y, int64_t ldy,
                     int accumulate, void *scratch) {
    const int64_t n_in = p->n_in, nb = n_in / 32, n = p->n;
    const int has_min = type == LP_Q4_1 || type == LP_Q5_1;
    int8_t *bt = (int8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *dv = (float *)(bt + 16 * n_in), *mv = dv + 16 * nb;
    weight_tiles(type, w, o0, o1, nb, bt, dv, mv);
    configure();
    int32_t c[2][256] __attribute__((aligned(64)));
    const __mmask16 cols = (__mmask16)((1u << (o1 - o0)) - 1);
    for (int64_t r0 = 0; r0 < n; r0 += 16) {
        const int mr = (int)(n - r0 < 16 ? n - r0 : 16);
        const int8_t *a = p->q + r0 * n_in;
        const float *dx[16], *sx[16];
        for (int m = 0; m < 16; m++) {
            const int64_t r = r0 + (m < mr ? m : mr - 1);
            dx[m] = p->d + r * nb, sx[m] = p->sum + r * nb;
        }
        __m512 acc[16];
        for (int m = 0; m < 16; m++) acc[m] = _mm512_setzero_ps();
#define TILE(b, C, A, B)                                                                                               \
    do {                                                                                                               \
        _tile_loadd(A, a + 32 * (b), n_in);                                                                            \
        _tile_loadd(B, bt + 512 * (b), 64);                                                                            \
        _tile_zero(C);                                                                                                 \
        _tile_dpbssd(C, A, B);                                                                                         \
        _tile_stored(C, c[(b) & 1], 64);                                                                               \
    } while (0)
#define ISSUE(b)                                                                                                       \
    do {                                                                                                               \
        if ((b) & 1)                                                                                                   \
            TILE(b, T_C1, T_A1, T_B1);                                                                                 \
        else                                                                                                           \
            TILE(b, T_C0, T_A0, T_B0);                                                                                 \
    } while (0)
        ISSUE(0);
        for (int64_t b = 1; b < nb; b++) {
            ISSUE(b);
            step(has_min, c[(b - 1) & 1], dv, mv, dx, sx, b - 1, acc);
        }
        step(has_min, c[(nb - 1) & 1], dv, mv, dx, sx, nb - 1, acc);
#undef ISSUE
#undef TILE
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) {
            if (m >= mr) break;
            float *yr = y + (r0 + m) * ldy + o0;
            _mm512_mask_storeu_ps(yr, cols, accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(cols, yr), acc[m]) : acc[m]);
        }
    }
    _tile_release();
}

void lp_det8_amx_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *p, float *y, int64_t ldy,
                       int accumulate, void *scratch) {
    switch (type) {
    case LP_Q4_0: chunk(LP_Q4_0, w, o0, o1, p, y, ldy, accumulate, scratch); break;
    case LP_Q4_1: chunk(LP_Q4_1, w, o0, o1, p, y, ldy, accumulate, scratch); break;
    case LP_Q5_0: chunk(LP_Q5_0, w, o0, o1, p, y, ldy, accumulate, scratch); break;
    case LP_Q5_1: chunk(LP_Q5_1, w, o0, o1, p, y, ldy, accumulate, scratch); break;
    default: chunk(LP_Q8_0, w, o0, o1, p, y, ldy, accumulate, scratch); break;
    }
}
#endif
