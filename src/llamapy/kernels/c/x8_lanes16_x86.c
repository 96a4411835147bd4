/* x8_lanes16_x86.c: see x8_lanes16_x86.h. */
#include "x8_lanes16_x86.h"

#if defined(LP_AVX2) && !defined(LP_AVX512)
/* The 8 x 8 int32 v[i] lane k -> v[k] lane i. */
static inline void tr8x8(__m256i v[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++)
        t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]), t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]), u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]), u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; i++)
        v[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20), v[4 + i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
}

void lp_x8_lanes16(const lp_x8 *p, lp_xlanes l, int64_t b) {
    const int64_t n_in = p->n_in, nb = n_in / 32, ng16 = n_in / 16;
    for (int64_t g = 0; g < l.n_grp; g++) {
        __m256i v[2][8]; /* v[h][i]: row 8 g + i's pairs 8 h .. 8 h + 7 of the block */
        for (int i = 0; i < 8; i++) {
            const int64_t r = 8 * g + i, at = (g * nb + b) * 8 + i;
            if (r < p->n) {
                const int8_t *xq = p->q + r * n_in + 32 * b;
                v[0][i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xq));
                v[1][i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xq + 16)));
                l.s[at] = p->d[r * nb + b], l.sum32[at] = p->sum[r * nb + b];
            } else {
                v[0][i] = v[1][i] = _mm256_setzero_si256();
                l.s[at] = l.sum32[at] = 0.0f;
            }
            l.sum16[(g * ng16 + 2 * b) * 8 + i] = l.sum16[(g * ng16 + 2 * b + 1) * 8 + i] = 0.0f;
        }
        __m256i *q = (__m256i *)(l.q + g * 8 * (n_in / 2) + 16 * b * 8); /* [pair k][lane]: 64-byte aligned (lp_xlanes_at) */
        for (int h = 0; h < 2; h++) {
            tr8x8(v[h]);
            for (int k = 0; k < 8; k++) _mm256_store_si256(q + 8 * h + k, v[h][k]);
        }
    }
}
#else
void lp_x8_lanes16(const lp_x8 *p, lp_xlanes l, int64_t b) { (void)p, (void)l, (void)b; }
#endif
