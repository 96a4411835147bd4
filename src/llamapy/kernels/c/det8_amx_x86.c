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
#define DEPTH 4 /* blocks in flight: a tile store's results reach the loads late */

static void configure(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = T_C0; t <= T_C1; t++) c.rows[t] = 16, c.colsb[t] = 64;
    for (int t = T_A0; t <= T_A1; t++) c.rows[t] = 16, c.colsb[t] = 32;
    for (int t = T_B0; t <= T_B1; t++) c.rows[t] = 8, c.colsb[t] = 64;
    __asm__ __volatile__("" : : "m"(c) : "memory"); /* all 64 bytes stored first: GCC (-O1) dropped the loops' stores */
    _tile_loadconfig(&c);
}

/* bt [nb][8][16][4] int8, dv and mv [nb][16] floats */
size_t lp_det8_amx_scratch_bytes(int64_t n_in) { return 16 * (size_t)n_in + 2 * (size_t)(n_in / 32) * 64 + 128; }

/* Weight rows o0..o1 (at most 16) of a type: bt's B tiles (row j's signed q = det8's bytes less
 * the offset, quad k of block b at bt + 512 b + 64 k + 4 j; rows past o1 zero), dv / mv the rows'
 * d and m (0 without a minimum) per block.  Per block the 16 rows' 8 quads transposed in
 * registers (rows j and j + 8 in one zmm's halves, an 8 x 8 transpose in each half). */
LP_INLINE void weight_tiles(const int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t nb, int8_t *bt, float *dv,
                            float *mv) {
    const int bb = bytes32(type), has_min = type == LP_Q4_1 || type == LP_Q5_1, nw = (int)(o1 - o0);
    const __m256i offv = _mm256_set1_epi8((char)lp_det8_offset(type));
    const uint8_t *rows[16];
    for (int j = 0; j < 16; j++) rows[j] = w + (o0 + (j < nw ? j : 0)) * bb * nb;
    for (int64_t b = 0; b < nb; b++) {
        uint16_t hd[16], hm[16];
        __m512i t[8], a[8], c[8];
        __m256i q[16];
        for (int j = 0; j < 16; j++) {
            const uint8_t *blk = rows[j] + bb * b;
            q[j] = j < nw ? _mm256_sub_epi8(lp_det8_bytes(type, blk), offv) : _mm256_setzero_si256(); /* Q8_0: its int8 (mod 256) */
            hd[j] = j < nw ? lp_rd16(blk) : 0, hm[j] = j < nw && has_min ? lp_rd16(blk + 2) : 0;
        }
        _mm512_store_ps(dv + 16 * b, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)hd)));
        _mm512_store_ps(mv + 16 * b, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)hm)));
        for (int j = 0; j < 8; j++) t[j] = _mm512_inserti64x4(_mm512_castsi256_si512(q[j]), q[j + 8], 1);
        for (int j = 0; j < 8; j += 2) a[j] = _mm512_unpacklo_epi32(t[j], t[j + 1]), a[j + 1] = _mm512_unpackhi_epi32(t[j], t[j + 1]);
        for (int h = 0; h < 8; h += 4) { /* c[h + i]: rows h .. h + 3 (and + 8), quad i of each 128-bit lane */
            c[h + 0] = _mm512_unpacklo_epi64(a[h], a[h + 2]), c[h + 1] = _mm512_unpackhi_epi64(a[h], a[h + 2]);
            c[h + 2] = _mm512_unpacklo_epi64(a[h + 1], a[h + 3]), c[h + 3] = _mm512_unpackhi_epi64(a[h + 1], a[h + 3]);
        }
        int32_t *o = (int32_t *)(bt + 512 * b);
        for (int i = 0; i < 4; i++) {
            const __m512i lo = _mm512_shuffle_i32x4(c[i], c[4 + i], 0x88), hi = _mm512_shuffle_i32x4(c[i], c[4 + i], 0xDD);
            _mm512_store_si512(o + 16 * i, _mm512_shuffle_i32x4(lo, lo, 0xD8));       /* quad i */
            _mm512_store_si512(o + 16 * (4 + i), _mm512_shuffle_i32x4(hi, hi, 0xD8)); /* quad 4 + i */
        }
    }
}

/* Block b's float step for 16 activation rows: c the stored int32 tile [16 rows][16 weight
 * rows], dx / sx the rows' d and sum of the block (lp_x8's lanes: [16]; rows past the product's
 * end 0, never stored).  Unrolled, so that acc stays in registers. */
LP_INLINE void step(const int has_min, const int32_t *c, const float *dv, const float *mv, const float *dx, const float *sx,
                    __m512 *acc) {
    const __m512 dw = _mm512_load_ps(dv), mw = _mm512_load_ps(mv);
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) {
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m)), _mm512_mul_ps(dw, _mm512_set1_ps(dx[m])), acc[m]);
        if (has_min) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(sx[m]), mw, acc[m]);
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
    int32_t c[DEPTH][256] __attribute__((aligned(64)));
    const __mmask16 cols = (__mmask16)((1u << (o1 - o0)) - 1);
    /* whole 64-byte lines written once each and not read here: around the cache (no read for ownership) */
    const int stream = !accumulate && o1 - o0 == 16 && ((uintptr_t)(y + o0) & 63) == 0 && ldy % 16 == 0;
    for (int64_t r0 = 0; r0 < n; r0 += 16) {
        const int mr = (int)(n - r0 < 16 ? n - r0 : 16);
        const int8_t *a = p->q + r0 * n_in;
        const float *dx = p->ld + r0 * nb, *sx = p->lsum + r0 * nb; /* group r0 / 16's lanes: [nb][16] */
        __m512 acc[16];
        for (int m = 0; m < 16; m++) acc[m] = _mm512_setzero_ps();
#define TILE(b, C, A, B)                                                                                               \
    do {                                                                                                               \
        _tile_loadd(A, a + 32 * (b), n_in);                                                                            \
        _tile_loadd(B, bt + 512 * (b), 64);                                                                            \
        _tile_zero(C);                                                                                                 \
        _tile_dpbssd(C, A, B);                                                                                         \
        _tile_stored(C, c[(b) % DEPTH], 64);                                                                           \
    } while (0)
#define ISSUE(b)                                                                                                       \
    do {                                                                                                               \
        if ((b) & 1)                                                                                                   \
            TILE(b, T_C1, T_A1, T_B1);                                                                                 \
        else                                                                                                           \
            TILE(b, T_C0, T_A0, T_B0);                                                                                 \
    } while (0)
        for (int64_t b = 0; b < DEPTH - 1 && b < nb; b++) ISSUE(b);
        for (int64_t b = 0; b < nb; b++) { /* block b + DEPTH - 1's tiles issued before block b's step */
            if (b + DEPTH - 1 < nb) ISSUE(b + DEPTH - 1);
            step(has_min, c[b % DEPTH], dv + 16 * b, mv + 16 * b, dx + 16 * b, sx + 16 * b, acc);
        }
#undef ISSUE
#undef TILE
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) {
            if (m >= mr) break;
            float *yr = y + (r0 + m) * ldy + o0;
            if (stream)
                _mm512_stream_ps(yr, acc[m]);
            else
                _mm512_mask_storeu_ps(yr, cols, accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(cols, yr), acc[m]) : acc[m]);
        }
    }
    if (stream) _mm_sfence();
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
