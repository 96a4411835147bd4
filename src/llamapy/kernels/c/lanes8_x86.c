/* The AVX2 level's int8 lanes (no VNNI): Q4_0 / Q4_1 / Q5_0 / Q5_1 weights against the
 * activation rows of a batched decode (mm.c lanes8_takes: where the int16 lanes of lanes_x86.c
 * took them), the rows rounded as ggml's AVX2 build rounds them for these types (Q8_0: int8 with
 * one scale per 32; llama.cpp's vec_dot_q5_0_q8_0 and kin).
 *
 *   lane layout (lp_xlanes8, per group of LP_NL = 8 rows): for each quad k of 4 adjacent
 *   elements one ymm whose lane r (a dword) holds row r's 4 int8 values; per block of 32 the
 *   rows' scales, integer sums and float sums.
 *   product: a weight quad (4 unsigned bytes, q + 8 or q + 16) broadcast to every lane, one
 *   vpmaddubsw (u8 weight x s8 activation, two products an int16) per quad, added in int16 for
 *   as many quads as cannot overflow -- 8 for 4 bits (0..15: 8 x 2 x 15 x 127 = 30480), 4 for 5
 *   bits (0..31: 4 x 2 x 31 x 127 = 31496) -- then vpmaddwd with ones to int32; the weights'
 *   offset comes off in int32 (off x the block's int8 sum, one shift per lane group and block);
 *   then the block's float step as the int16 lanes (d s, Q4_1 / Q5_1's m x s x the block's int8
 *   sum, ggml's Q8_1 s).  About 21 vector uops per 256 products and weight row against the int16
 *   lanes' 35 (vpmaddwd + vpaddd per pair).
 *
 * A row's outputs depend on its own values only (not on the batch); they are its one-row
 * products with the activations rounded to int8 instead of int16. */
#include "lanes8_x86.h"

#include "blocks_x86.h"
#include "q8_avx2.h"

#if defined(LP_LANES8)
#define NL LP_NL

size_t lp_xlanes8_bytes(int64_t n_in, int64_t n) {
    const int64_t ng = (n + NL - 1) / NL;
    return (size_t)(ng * NL) * ((size_t)n_in + (size_t)(n_in / 32) * 12) + 128;
}

lp_xlanes8 lp_xlanes8_at(void *buf, int64_t n_in, int64_t n) {
    lp_xlanes8 l;
    const int64_t ng = (n + NL - 1) / NL;
    l.n_in = n_in;
    l.n_grp = ng;
    l.q = (int32_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    l.s = (float *)(l.q + ng * NL * (n_in / 4));
    l.isum = (int32_t *)(l.s + ng * NL * (n_in / 32));
    l.sum = (float *)(l.isum + ng * NL * (n_in / 32));
    return l;
}

void lp_xlanes8_fill(const float *x, int64_t n, lp_xlanes8 l, int64_t b) {
    const int64_t n_in = l.n_in, nb = n_in / 32, nq = n_in / 4;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t r = 0; r < l.n_grp * NL; r++) {
        const int64_t g = r / NL, lane = r % NL, at = (g * nb + b) * NL + lane;
        int32_t *q = l.q + (g * nq + 8 * b) * NL + lane;
        if (r >= n) { /* zeros: garbage scales can be subnormal (a microcode assist per float step) */
            for (int k = 0; k < 8; k++) q[NL * k] = 0;
            l.s[at] = l.sum[at] = 0.0f;
            l.isum[at] = 0;
            continue;
        }
        const float *xb = x + r * n_in + 32 * b;
        __m256 xv[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            xv[k] = _mm256_loadu_ps(xb + 8 * k);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, xv[k]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f; /* ggml's id: 1 / d */
        __m256i qv[4];
        for (int k = 0; k < 4; k++) qv[k] = _mm256_cvtps_epi32(_mm256_mul_ps(xv[k], _mm256_set1_ps(inv))); /* nearest even */
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qv[0], qv[1]), _mm256_packs_epi32(qv[2], qv[3]));
        int32_t quads[8]; /* the block's 32 int8 in element order, 4 a dword */
        _mm256_storeu_si256((__m256i *)quads, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        for (int k = 0; k < 8; k++) q[NL * k] = quads[k];
        l.s[at] = amax / 127.0f;
        l.isum[at] = q8_hsum_i(_mm256_add_epi32(_mm256_add_epi32(qv[0], qv[1]), _mm256_add_epi32(qv[2], qv[3])));
        l.sum[at] = l.s[at] * (float)l.isum[at]; /* the rounded values' sum, as ggml's Q8_1 s (not x's exact sum: that left the
            * rounding error of x against d q alone, all of one sign for Q4_1 / Q5_1: 1.6% of the largest output against
            * 0.6% for Q4_0, randn rows of 160) */
    }
}

/* the weights' offset to unsigned: Q4_0 8, Q5_0 16, the types with a minimum none */
LP_INLINE int off8(const int type) { return type == LP_Q4_0 ? 8 : type == LP_Q5_0 ? 16 : 0; }

void lp_unpack_row8_32(int type, const uint8_t *row, int64_t n_in, uint8_t *u8, float *d, float *m) {
    const int bb = bytes32(type);
    const __m256i o = _mm256_set1_epi8((char)off8(type));
    for (int64_t b = 0; b < n_in / 32; b++) {
        const __m256i w = block32(type, row + b * bb, &d[b], &m[b]);
        _mm256_storeu_si256((__m256i *)(u8 + 32 * b), _mm256_add_epi8(w, o));
    }
}

/* a + t in int16, kept where it stands: GCC otherwise hoisted every vpmaddubsw of the unrolled
 * quads ahead of their adds and spilled them (lanes_x86.c pair_dot's note; the same integers) */
LP_INLINE __m256i add16(__m256i a, __m256i t) {
    __m256i r = _mm256_add_epi16(a, t);
    __asm__("" : "+x"(r));
    return r;
}

/* Four vectors of lanes as rows (lanes_x86.c store_rows4's AVX2 transpose). */
LP_INLINE void store_rows4(__m256 a0, __m256 a1, __m256 a2, __m256 a3, float *y, int64_t ldy) {
    const __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
    const __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
    const __m256 r[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE), _mm256_shuffle_ps(t1, t3, 0x44),
                         _mm256_shuffle_ps(t1, t3, 0xEE)};
    for (int k = 0; k < 4; k++) {
        _mm_storeu_ps(y + k * ldy, _mm256_castps256_ps128(r[k]));
        _mm_storeu_ps(y + (4 + k) * ldy, _mm256_extractf128_ps(r[k], 1));
    }
}

/* NW weight rows against NG lane groups g0..: per block of 32, NG x NW chains of vpmaddubsw
 * summed in int16 over SPAN quads (8: 4 bits, 4: 5 bits), vpmaddwd with ones to int32, the
 * offset (SHIFT: log2 of it; 0: none) off x isum taken off, then the float step. */
LP_INLINE void tile8(const int NG, const int NW, const int SPAN, const int SHIFT, const int has_min, const uint8_t *const *u8,
                     const float *const *d, const float *const *m, const lp_xlanes8 *l, int64_t g0, const char *pf,
                     int64_t pf_lines, float *y, int64_t ldy) {
    const int64_t n_in = l->n_in, nb = n_in / 32, nq = n_in / 4, pf_b = (pf_lines + nb - 1) / nb;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i *xq[2];
    const float *s[2], *sum[2];
    const int32_t *isum[2];
    for (int i = 0; i < NG; i++) {
        xq[i] = (const __m256i *)(l->q + (g0 + i) * NL * nq);
        s[i] = l->s + (g0 + i) * NL * nb;
        sum[i] = l->sum + (g0 + i) * NL * nb;
        isum[i] = l->isum + (g0 + i) * NL * nb;
    }
    __m256 acc[2][4];
    for (int i = 0; i < NG; i++)
        for (int j = 0; j < NW; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t t = b * pf_b; t < (b + 1) * pf_b && t < pf_lines; t++) LP_PREFETCH_W(pf + 64 * t);
        __m256i p[2][4];
        for (int h = 0; h < 8; h += SPAN) {
            __m256i s16[2][4];
#pragma GCC unroll 8
            for (int k = 0; k < SPAN; k++) {
                const int64_t qk = 8 * b + h + k;
                for (int j = 0; j < NW; j++) {
                    int32_t wq;
                    memcpy(&wq, u8[j] + 4 * qk, 4);
                    const __m256i wv = _mm256_set1_epi32(wq); /* a broadcast load */
                    for (int i = 0; i < NG; i++) {
                        const __m256i t = _mm256_maddubs_epi16(wv, _mm256_load_si256(xq[i] + qk));
                        s16[i][j] = k == 0 ? t : add16(s16[i][j], t);
                    }
                }
            }
            for (int i = 0; i < NG; i++)
                for (int j = 0; j < NW; j++) {
                    const __m256i t = _mm256_madd_epi16(s16[i][j], ones);
                    p[i][j] = h == 0 ? t : _mm256_add_epi32(p[i][j], t);
                }
        }
        for (int i = 0; i < NG; i++) {
            const __m256 sv = _mm256_loadu_ps(s[i] + NL * b);
            const __m256i ov = SHIFT ? _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(isum[i] + NL * b)), SHIFT)
                                     : _mm256_setzero_si256();
            for (int j = 0; j < NW; j++) {
                const __m256i pj = SHIFT ? _mm256_sub_epi32(p[i][j], ov) : p[i][j];
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pj), _mm256_mul_ps(_mm256_set1_ps(d[j][b]), sv), acc[i][j]);
                if (has_min)
                    acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(sum[i] + NL * b), _mm256_set1_ps(m[j][b]), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < NG; i++)
        store_rows4(acc[i][0], NW > 1 ? acc[i][1] : _mm256_setzero_ps(), NW > 2 ? acc[i][2] : _mm256_setzero_ps(),
                    NW > 3 ? acc[i][3] : _mm256_setzero_ps(), y + NL * i * ldy, ldy);
}

#define TILE8(NG, NW)                                                                                                  \
    do {                                                                                                               \
        switch (type) {                                                                                                \
        case LP_Q4_0: tile8(NG, NW, 8, 3, 0, u8, d, m, l, g0, pf, pf_lines, y, ldy); break;                            \
        case LP_Q4_1: tile8(NG, NW, 8, 0, 1, u8, d, m, l, g0, pf, pf_lines, y, ldy); break;                            \
        case LP_Q5_0: tile8(NG, NW, 4, 4, 0, u8, d, m, l, g0, pf, pf_lines, y, ldy); break;                            \
        default: tile8(NG, NW, 4, 0, 1, u8, d, m, l, g0, pf, pf_lines, y, ldy); break; /* Q5_1 */                     \
        }                                                                                                              \
    } while (0)

void lp_lanes8_tile(int type, int ng, int nw, const uint8_t *const *u8, const float *const *d, const float *const *m,
                    const lp_xlanes8 *l, int64_t g0, const char *pf, int64_t pf_lines, float *y, int64_t ldy) {
    switch (ng * 8 + nw) {
    case 17: TILE8(2, 1); break;
    case 18: TILE8(2, 2); break;
    case 9: TILE8(1, 1); break;
    case 10: TILE8(1, 2); break;
    case 11: TILE8(1, 3); break;
    case 12: TILE8(1, 4); break;
    default: TILE8(2, 2); break; /* (ng 2 takes at most LANES8_NW2 rows: mm_lanes.h lanes8_chunk) */
    }
}
#undef TILE8
#endif
