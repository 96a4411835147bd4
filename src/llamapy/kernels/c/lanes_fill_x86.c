/* The activation rows' lane layout for x86's int16 lanes (lanes_x86.h lp_xlanes): its size, its
 * place in a buffer, and the rows' blocks written into it (lp_xlanes_fill). */
#include "lanes_fill_x86.h"

#if defined(LP_LANES)
#define NL LP_NL

size_t lp_xlanes_bytes(int64_t n_in, int64_t n) {
    const int64_t ng = (n + NL - 1) / NL;
    return (size_t)(ng * NL) * ((size_t)n_in * 2 + (size_t)(n_in / 32) * 8 + (size_t)(n_in / 16) * 4) + 128;
}

lp_xlanes lp_xlanes_at(void *buf, int64_t n_in, int64_t n) {
    lp_xlanes l;
    const int64_t ng = (n + NL - 1) / NL;
    l.n_in = n_in;
    l.n_grp = ng;
    l.q = (int32_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    l.s = (float *)(l.q + ng * NL * (n_in / 2));
    l.sum32 = l.s + ng * NL * (n_in / 32);
    l.sum16 = l.sum32 + ng * NL * (n_in / 32);
    return l;
}

/* The 16 int32 pairs of block b of NL rows (src: row r's at src + r n_in / 2) as the lanes'
 * 16 vectors at q (pair k's vector at q + NL k): an NL x 16 transpose in registers (a scalar
 * 32-bit store per element had been 6-9% of a 512-row det product's CPU time). */
LP_INLINE void fill_group(const int32_t *src, int64_t ld, int32_t *q) {
#if defined(LP_AVX512)
    __m512i r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + i * ld);
    for (int i = 0; i < 16; i += 2) { /* t[i]: r_i[0] r_i+1[0] r_i[1] r_i+1[1] | [4] [5] | .., t[i + 1] the [2] [3]s */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int q4 = 0; q4 < 4; q4++) { /* r[4 q4 + c], 128-bit lane L: rows 4 q4 .. 4 q4 + 3 of pair 4 L + c */
        const __m512i *u = t + 4 * q4;
        r[4 * q4] = _mm512_unpacklo_epi64(u[0], u[2]);
        r[4 * q4 + 1] = _mm512_unpackhi_epi64(u[0], u[2]);
        r[4 * q4 + 2] = _mm512_unpacklo_epi64(u[1], u[3]);
        r[4 * q4 + 3] = _mm512_unpackhi_epi64(u[1], u[3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), w0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xDD);
        const __m512i v1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88), w1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xDD);
        _mm512_store_si512(q + NL * c, _mm512_shuffle_i32x4(v0, v1, 0x88));
        _mm512_store_si512(q + NL * (4 + c), _mm512_shuffle_i32x4(w0, w1, 0x88));
        _mm512_store_si512(q + NL * (8 + c), _mm512_shuffle_i32x4(v0, v1, 0xDD));
        _mm512_store_si512(q + NL * (12 + c), _mm512_shuffle_i32x4(w0, w1, 0xDD));
    }
#else
    for (int half = 0; half < 2; half++) { /* pairs 8 half .. 8 half + 7: an 8 x 8 transpose */
        __m256i r[8], t[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_si256((const __m256i *)(src + i * ld + 8 * half));
        for (int i = 0; i < 8; i += 2) {
            t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
            t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
        }
        for (int q4 = 0; q4 < 2; q4++) {
            const __m256i *u = t + 4 * q4;
            r[4 * q4] = _mm256_unpacklo_epi64(u[0], u[2]);
            r[4 * q4 + 1] = _mm256_unpackhi_epi64(u[0], u[2]);
            r[4 * q4 + 2] = _mm256_unpacklo_epi64(u[1], u[3]);
            r[4 * q4 + 3] = _mm256_unpackhi_epi64(u[1], u[3]);
        }
        int32_t *o = q + NL * 8 * half;
        for (int c = 0; c < 4; c++) {
            _mm256_store_si256((__m256i *)(o + NL * c), _mm256_permute2x128_si256(r[c], r[4 + c], 0x20));
            _mm256_store_si256((__m256i *)(o + NL * (4 + c)), _mm256_permute2x128_si256(r[c], r[4 + c], 0x31));
        }
    }
#endif
}

/* NL floats ld apart (a row's scale each) as one vector of lanes at dst. */
LP_INLINE void gather_lanes(const float *src, int64_t ld, float *dst) {
#if defined(LP_AVX512)
    const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32((int)ld));
    _mm512_storeu_ps(dst, _mm512_i32gather_ps(at, src, 4));
#else
    const __m256i at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)ld));
    _mm256_storeu_ps(dst, _mm256_i32gather_ps(src, at, 4));
#endif
}

/* Block b (32 elements) of the n rows of xr (prepared: lp_prepare_x_row) into the lanes, each
 * row in `per` adjacent lanes: per 1, row r in lane r % NL of group r / NL; per 2 (the twin
 * lanes below, n <= LP_FEW_ROWS), row r in lanes 2r and 2r + 1 of the one group.  A group's
 * lanes past the last row hold zeros (their outputs are never read). */
void lp_xlanes_fill(const lp_xrows *xr, int64_t n, lp_xlanes l, int64_t b, int per) {
    const int64_t n_in = l.n_in, nb = n_in / 32, ng16 = n_in / 16;
    const int64_t full = per == 1 ? n / NL : 0; /* whole groups: a transpose and four gathers each */
    for (int64_t g = 0; g < full; g++) {
        const int64_t r = g * NL;
        if (b + 1 < nb) /* the rows' next block (the next call's, this thread's: the callers' static schedule): the
                         * rows lie n_in int16 apart, a stream each, too many for the prefetchers (Q6_K 640 x 2048,
                         * 512 rows: 4% of the det product here, its loads' misses) */
            for (int i = 0; i < NL; i++) _mm_prefetch((const char *)(xr->q + (r + i) * n_in + 32 * (b + 1)), _MM_HINT_T0);
        fill_group((const int32_t *)(xr->q + r * n_in) + 16 * b, n_in / 2, l.q + g * NL * (n_in / 2) + NL * 16 * b);
        gather_lanes(xr->s + r * nb + b, nb, l.s + (g * nb + b) * NL);
        gather_lanes(xr->sum32 + r * nb + b, nb, l.sum32 + (g * nb + b) * NL);
        gather_lanes(xr->sum16 + r * ng16 + 2 * b, ng16, l.sum16 + (g * ng16 + 2 * b) * NL);
        gather_lanes(xr->sum16 + r * ng16 + 2 * b + 1, ng16, l.sum16 + (g * ng16 + 2 * b + 1) * NL);
    }
    for (int64_t r = full * NL; r < n; r++) {
        const int64_t g = r * per / NL, lane = r * per % NL;
        const int32_t *src = (const int32_t *)(xr->q + r * n_in);
        int32_t *q = l.q + g * NL * (n_in / 2) + lane;
        float *s = l.s + (g * nb + b) * NL + lane, *s32 = l.sum32 + (g * nb + b) * NL + lane;
        float *s16 = l.sum16 + (g * ng16 + 2 * b) * NL + lane;
        for (int h = 0; h < per; h++) {
            for (int64_t k = 16 * b; k < 16 * b + 16; k++) q[NL * k + h] = src[k];
            s[h] = xr->s[r * nb + b];
            s32[h] = xr->sum32[r * nb + b];
            s16[h] = xr->sum16[r * ng16 + 2 * b];
            s16[NL + h] = xr->sum16[r * ng16 + 2 * b + 1];
        }
    }
    for (int64_t li = n * per; li < l.n_grp * NL; li++) { /* a last group's lanes past the rows: zeros, for garbage
        * scales can be subnormal, whose float steps cost a microcode assist each on Intel cores (a 17-row product
        * of SmolLM2's 3072 x 576 Q8_0 took 605-804 us against 174 at 16 rows and 288 zeroed) */
        const int64_t g = li / NL, lane = li % NL;
        int32_t *q = l.q + g * NL * (n_in / 2) + lane;
        for (int64_t k = 16 * b; k < 16 * b + 16; k++) q[NL * k] = 0;
        l.s[(g * nb + b) * NL + lane] = l.sum32[(g * nb + b) * NL + lane] = 0.0f;
        l.sum16[(g * ng16 + 2 * b) * NL + lane] = l.sum16[(g * ng16 + 2 * b + 1) * NL + lane] = 0.0f;
    }
}
#endif
