/* Deterministic mode's products of the 32-element types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) for two
 * rows or more at the AVX2 level: det8_x86.h's contract, the same sequence per (row, output) as
 * its one-row kernel (det8_row_x86.c), so any row count and thread split gives the same bits:
 *
 *   i   = the exact int32 sum of u_w[k] q_x[k] over the block of 32, less off x qs
 *   acc = fmaf((float)i, d_w * d_x, acc)          and with a minimum   acc = fmaf(sum_x, m_w, acc)
 *
 * The rows sit in lanes (lp_x8's lq: a 16-row group, read as two ymm halves of 8 rows), a weight
 * quad broadcast to every lane.  Without VNNI the products are ggml's AVX2 pair (vpmaddubsw, then
 * vpmaddwd by ones): vpmaddubsw's int16 pairs are exact while |u s + u s| <= 32767, so G of them
 * add in int16 before vpmaddwd widens them: u <= 15 (Q4_0 + 8, Q4_1) 8 quads (8 x 2 x 15 x 127 =
 * 30480), u <= 31 (Q5_0 + 16, Q5_1) 4 quads (31496), Q8_0 signed (LP_DET8_Q8_SIGNED:
 * vpmaddubsw(|q_w|, sign(q_x, q_w)), 2 x 128 x 127 = 32512) one.  With AVX-VNNI one vpdpbusd a
 * quad (Q8_0 then q + 128).  Every route gives the exact integer, so the bits are the sequence's. */
#include "det8_avx2_x86.h"

#if defined(LP_AVX2) && !defined(LP_AVX512)
#define NL8 16 /* rows per lane group (lp_x8) */
#define TW 2   /* weight rows per tile: 2 halves x 2 weights keep int16, int32 and float sums in 16 ymm */

static void *al32(void *p) { return (void *)(((uintptr_t)p + 31) & ~(uintptr_t)31); }
static size_t w8_bytes(int64_t n_in) { return (size_t)n_in + (size_t)(n_in / 32) * 8 + 64; }
size_t lp_det8_scratch256_bytes(int64_t n_in) { return TW * w8_bytes(n_in) + 64; }

/* kinds of weights: their offset taken off (Q4_0, Q5_0, Q8_0 with VNNI), a minimum (Q4_1, Q5_1), signed (Q8_0) */
enum { K_OFF = 0, K_MIN = 1, K_SIGNED = 2 };

/* NH halves (1: rows 16 g .. 16 g + 8 only) x NW weight rows (u[j], wd[j], wm[j]) of lane group g:
 * t[16 j + lane] = lane's output j.  G: quads summed in int16 (no VNNI); sh: log2 of the offset. */
LP_INLINE void tile(const int NH, const int NW, const int KIND, const int G, const uint8_t *const *u,
                    const float *const *wd, const float *const *wm, const lp_x8 *p, int64_t g, int sh, float *t) {
    const int64_t nb = p->n_in / 32, nq = p->n_in / 4;
    const int32_t *xq = p->lq + g * NL8 * nq, *qx = p->lqs + g * NL8 * nb;
    const float *dx = p->ld + g * NL8 * nb, *sx = p->lsum + g * NL8 * nb;
    __m256 acc[2][TW];
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < NW; j++) acc[h][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i s[2][TW];
#if defined(LP_AVXVNNI)
        (void)G;
        for (int h = 0; h < NH; h++)
            for (int j = 0; j < NW; j++) s[h][j] = _mm256_setzero_si256();
        for (int k = 0; k < 8; k++) {
            __m256i xv[2];
            for (int h = 0; h < NH; h++) xv[h] = _mm256_load_si256((const __m256i *)(xq + (8 * b + k) * NL8 + 8 * h));
            for (int j = 0; j < NW; j++) {
                int32_t wq;
                memcpy(&wq, u[j] + 32 * b + 4 * k, 4);
                const __m256i wb = _mm256_set1_epi32(wq);
                for (int h = 0; h < NH; h++) s[h][j] = _mm256_dpbusd_avx_epi32(s[h][j], wb, xv[h]);
            }
        }
#else
        const __m256i ones = _mm256_set1_epi16(1);
        for (int k0 = 0; k0 < 8; k0 += G) {
            __m256i a[2][TW];
            for (int k = k0; k < k0 + G; k++) {
                __m256i xv[2];
                for (int h = 0; h < NH; h++) xv[h] = _mm256_load_si256((const __m256i *)(xq + (8 * b + k) * NL8 + 8 * h));
                for (int j = 0; j < NW; j++) {
                    int32_t wq;
                    memcpy(&wq, u[j] + 32 * b + 4 * k, 4);
                    const __m256i wb = _mm256_set1_epi32(wq), wa = KIND == K_SIGNED ? _mm256_abs_epi8(wb) : wb;
                    for (int h = 0; h < NH; h++) {
                        const __m256i pr = _mm256_maddubs_epi16(wa, KIND == K_SIGNED ? _mm256_sign_epi8(xv[h], wb) : xv[h]);
                        a[h][j] = k == k0 ? pr : _mm256_add_epi16(a[h][j], pr);
                    }
                }
            }
            for (int h = 0; h < NH; h++)
                for (int j = 0; j < NW; j++) {
                    const __m256i m = _mm256_madd_epi16(a[h][j], ones);
                    s[h][j] = k0 == 0 ? m : _mm256_add_epi32(s[h][j], m);
                }
        }
#endif
        for (int h = 0; h < NH; h++) {
            const __m256 dv = _mm256_load_ps(dx + NL8 * b + 8 * h);
            if (KIND == K_OFF) { /* off x qs, exact: off is a power of two */
                const __m256i c = _mm256_slli_epi32(_mm256_load_si256((const __m256i *)(qx + NL8 * b + 8 * h)), sh);
                for (int j = 0; j < NW; j++) s[h][j] = _mm256_sub_epi32(s[h][j], c);
            }
            for (int j = 0; j < NW; j++)
                acc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h][j]), _mm256_mul_ps(_mm256_set1_ps(wd[j][b]), dv), acc[h][j]);
            if (KIND == K_MIN) {
                const __m256 sv = _mm256_load_ps(sx + NL8 * b + 8 * h);
                for (int j = 0; j < NW; j++) acc[h][j] = _mm256_fmadd_ps(sv, _mm256_set1_ps(wm[j][b]), acc[h][j]);
            }
        }
    }
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < NW; j++) _mm256_storeu_ps(t + NL8 * j + 8 * h, acc[h][j]);
}

/* the type's tile for nh halves and nw weight rows */
#define TILE_CASES(KIND, G)                                                                                    \
    switch ((nh - 1) * 2 + nw - 1) {                                                                           \
    case 0: tile(1, 1, KIND, G, u, wd, wm, p, g, sh, t); break;                                               \
    case 1: tile(1, 2, KIND, G, u, wd, wm, p, g, sh, t); break;                                               \
    case 2: tile(2, 1, KIND, G, u, wd, wm, p, g, sh, t); break;                                               \
    default: tile(2, 2, KIND, G, u, wd, wm, p, g, sh, t); break;                                              \
    }
static void tile_k(int type, int nh, int nw, const uint8_t *const *u, const float *const *wd, const float *const *wm,
                   const lp_x8 *p, int64_t g, float *t) {
    const int off = lp_det8_offset(type), sh = off == 8 ? 3 : off == 16 ? 4 : 7;
    if (type == LP_Q4_1) TILE_CASES(K_MIN, 8)
    else if (type == LP_Q5_1) TILE_CASES(K_MIN, 4)
    else if (type == LP_Q4_0) TILE_CASES(K_OFF, 8)
    else if (type == LP_Q5_0) TILE_CASES(K_OFF, 4)
#if defined(LP_DET8_Q8_SIGNED)
    else TILE_CASES(K_SIGNED, 1)
#else
    else TILE_CASES(K_OFF, 1)
#endif
}
#undef TILE_CASES

void lp_det8_chunk256(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *p, float *y, int64_t ldy,
                      int accumulate, void *scratch) {
    const int64_t n_in = p->n_in, nb = n_in / 32, rb = bytes32(type) * nb, n = p->n;
    uint8_t *u[TW];
    float *wd[TW], *wm[TW];
    for (int j = 0; j < TW; j++) {
        u[j] = (uint8_t *)al32((char *)scratch + j * w8_bytes(n_in));
        wd[j] = (float *)(u[j] + n_in), wm[j] = wd[j] + nb;
    }
    float t[NL8 * TW] __attribute__((aligned(32)));
    for (int64_t o = o0; o < o1; o += TW) {
        const int nw = (int)(o1 - o < TW ? o1 - o : TW);
        for (int j = 0; j < nw; j++) lp_det8_unpack(type, w + (o + j) * rb, n_in, u[j], wd[j], wm[j]);
        for (int64_t g = 0; g < p->n_grp; g++) {
            const int64_t rows = n - NL8 * g < NL8 ? n - NL8 * g : NL8;
            tile_k(type, rows > 8 ? 2 : 1, nw, (const uint8_t *const *)u, (const float *const *)wd, (const float *const *)wm, p,
                   g, t);
            for (int64_t i = 0; i < rows; i++)
                for (int j = 0; j < nw; j++) {
                    float *yo = y + (NL8 * g + i) * ldy + o + j;
                    *yo = accumulate ? *yo + t[NL8 * j + i] : t[NL8 * j + i];
                }
        }
    }
}
#endif
