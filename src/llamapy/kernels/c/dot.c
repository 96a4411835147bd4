/* The few-row products of one canonical weight row (lp.h) against n prepared activation rows:
 *   y[i] = sum over blocks b of 32 [ (p_b0 + p_b1) * (d16[2b] s_b) ]            g16 = 0
 *          sum over 16-groups g  [ p_g * (d16[g] s_{g/2}) ]                       g16 = 1
 *        + sum over 16-groups g  [ m16[g] sum16_g(x) ]                            has_min
 * where p_g is the exact integer dot of the group's 16 int8 weights with its 16 int16
 * activations.  Every ISA computes the same integers; the fp32 sums differ only in order.
 *
 * Paths: AVX-512 (one block of 32 int16 per zmm; vpdpwssd with VNNI), AVX2 (two ymm per block,
 * vpmaddwd), NEON (vmull/vmlal on int16, or with the dot-product extension two sdot per 16:
 * xq = 256 qh + ql), portable C.  Rows are taken in tiles whose accumulators stay in
 * registers: 16 (AVX-512), 8 (AVX2, NEON). */
#include "lp.h"

/* m16 . sum16 of row r (the minimum's share). */
static float min_term(const float *m16, const float *sum16, int64_t ng) {
    float t = 0.0f;
#pragma omp simd reduction(+ : t)
    for (int64_t g = 0; g < ng; g++) t += m16[g] * sum16[g];
    return t;
}

#if defined(LP_AVX512)
LP_INLINE void tile_avx512(const int rt, const int g16, lp_wrow w, const lp_xrows *xr, int64_t r0, float *y) {
    const int64_t n_in = xr->n_in, nb = n_in / 32;
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc[16];
    for (int i = 0; i < rt; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m512i wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w.q + 32 * b)));
        __m512 dv;
        if (g16)
            dv = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(w.d16 + 2 * b)))));
        else
            dv = _mm512_set1_ps(w.d16[2 * b]);
        for (int i = 0; i < rt; i++) {
            const int64_t r = r0 + i;
            const __m512i xv = _mm512_loadu_si512(xr->q + r * n_in + 32 * b);
#if defined(LP_VNNI)
            const __m512i p = _mm512_dpwssd_epi32(_mm512_setzero_si512(), wv, xv);
#else
            const __m512i p = _mm512_madd_epi16(wv, xv);
#endif
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dv, _mm512_set1_ps(xr->s[r * nb + b])), acc[i]);
        }
    }
    for (int i = 0; i < rt; i++) y[i] = _mm512_reduce_add_ps(acc[i]);
}
#define LP_TILE 16
#define TILE_FN tile_avx512
#elif defined(LP_AVX2)
LP_INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

LP_INLINE void tile_avx2(const int rt, const int g16, lp_wrow w, const lp_xrows *xr, int64_t r0, float *y) {
    const int64_t n_in = xr->n_in, nb = n_in / 32;
    __m256 acc[8];
    for (int i = 0; i < rt; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i w8 = _mm256_loadu_si256((const __m256i *)(w.q + 32 * b));
        const __m256i wl = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w8));
        const __m256i wh = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(w8, 1));
        const float d0 = w.d16[2 * b], d1 = w.d16[2 * b + 1];
        for (int i = 0; i < rt; i++) {
            const int64_t r = r0 + i;
            const int16_t *xq = xr->q + r * n_in + 32 * b;
            const float s = xr->s[r * nb + b];
            const __m256i pl = _mm256_madd_epi16(wl, _mm256_loadu_si256((const __m256i *)xq));
            const __m256i ph = _mm256_madd_epi16(wh, _mm256_loadu_si256((const __m256i *)(xq + 16)));
            if (g16) {
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pl), _mm256_set1_ps(d0 * s), acc[i]);
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ph), _mm256_set1_ps(d1 * s), acc[i]);
            } else {
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(pl, ph)), _mm256_set1_ps(d0 * s), acc[i]);
            }
        }
    }
    for (int i = 0; i < rt; i++) y[i] = hsum256(acc[i]);
}
#define LP_TILE 8
#define TILE_FN tile_avx2
#elif defined(LP_NEON)
/* The exact int32x4 partial dot of 16 weights w (int8x16) with row r's activations at k. */
LP_INLINE int32x4_t dot16_neon(int8x16_t w, const lp_xrows *xr, int64_t off) {
#if defined(LP_DOTPROD)
    const int32x4_t h = vdotq_s32(vdupq_n_s32(0), w, vld1q_s8(xr->qh + off));
    const int32x4_t l = vdotq_s32(vdupq_n_s32(0), w, vld1q_s8(xr->ql + off));
    return vaddq_s32(vshlq_n_s32(h, 8), l);
#else
    const int16x8_t w0 = vmovl_s8(vget_low_s8(w)), w1 = vmovl_s8(vget_high_s8(w));
    const int16x8_t x0 = vld1q_s16(xr->q + off), x1 = vld1q_s16(xr->q + off + 8);
    int32x4_t p = vmull_s16(vget_low_s16(w0), vget_low_s16(x0));
    p = vmlal_high_s16(p, w0, x0);
    p = vmlal_s16(p, vget_low_s16(w1), vget_low_s16(x1));
    return vmlal_high_s16(p, w1, x1);
#endif
}

LP_INLINE void tile_neon(const int rt, const int g16, lp_wrow w, const lp_xrows *xr, int64_t r0, float *y) {
    const int64_t n_in = xr->n_in, nb = n_in / 32;
    float32x4_t acc[8];
    for (int i = 0; i < rt; i++) acc[i] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const int8x16_t wl = vld1q_s8(w.q + 32 * b), wh = vld1q_s8(w.q + 32 * b + 16);
        const float d0 = w.d16[2 * b], d1 = w.d16[2 * b + 1];
        for (int i = 0; i < rt; i++) {
            const int64_t r = r0 + i, off = r * n_in + 32 * b;
            const float s = xr->s[r * nb + b];
            const int32x4_t pl = dot16_neon(wl, xr, off), ph = dot16_neon(wh, xr, off + 16);
            if (g16) {
                acc[i] = vfmaq_n_f32(acc[i], vcvtq_f32_s32(pl), d0 * s);
                acc[i] = vfmaq_n_f32(acc[i], vcvtq_f32_s32(ph), d1 * s);
            } else {
                acc[i] = vfmaq_n_f32(acc[i], vcvtq_f32_s32(vaddq_s32(pl, ph)), d0 * s);
            }
        }
    }
    for (int i = 0; i < rt; i++) y[i] = vaddvq_f32(acc[i]);
}
#define LP_TILE 8
#define TILE_FN tile_neon
#else
LP_INLINE void tile_portable(const int rt, const int g16, lp_wrow w, const lp_xrows *xr, int64_t r0, float *y) {
    const int64_t n_in = xr->n_in, nb = n_in / 32;
    for (int i = 0; i < rt; i++) {
        const int64_t r = r0 + i;
        const int16_t *xq = xr->q + r * n_in;
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            int32_t pl = 0, ph = 0;
            for (int j = 0; j < 16; j++) pl += (int32_t)w.q[32 * b + j] * xq[32 * b + j];
            for (int j = 16; j < 32; j++) ph += (int32_t)w.q[32 * b + j] * xq[32 * b + j];
            const float s = xr->s[r * nb + b];
            if (g16)
                acc += (float)pl * (w.d16[2 * b] * s) + (float)ph * (w.d16[2 * b + 1] * s);
            else
                acc += (float)(pl + ph) * (w.d16[2 * b] * s);
        }
        y[i] = acc;
    }
}
#define LP_TILE 8
#define TILE_FN tile_portable
#endif

/* One tile of rt rows, rt a constant in each instance (the accumulators stay in registers). */
static void tile(int rt, int g16, lp_wrow w, const lp_xrows *xr, int64_t r0, float *y) {
#define CASE(k)                                                                                                        \
    case k:                                                                                                            \
        if (g16)                                                                                                       \
            TILE_FN(k, 1, w, xr, r0, y);                                                                               \
        else                                                                                                           \
            TILE_FN(k, 0, w, xr, r0, y);                                                                               \
        break;
    switch (rt) {
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#if LP_TILE > 8
        CASE(9) CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
#endif
    }
#undef CASE
}

void lp_dot_rows(int g16, int has_min, lp_wrow w, const lp_xrows *xr, int64_t r0, int n, float *y) {
    for (int i0 = 0; i0 < n; i0 += LP_TILE) {
        const int rt = n - i0 < LP_TILE ? n - i0 : LP_TILE;
        tile(rt, g16, w, xr, r0 + i0, y + i0);
    }
    if (has_min) {
        const int64_t ng = xr->n_in / 16;
        for (int i = 0; i < n; i++) y[i] += min_term(w.m16, xr->sum16 + (r0 + i) * ng, ng);
    }
}

/* y0[i] = w0 . x_i and y1[i] = w1 . x_i in fp32 for n <= 4 rows x_i (stride ldx): exact
 * products, vectorized sums; each activation load feeds both weight rows, each weight load
 * four activation rows. */
void lp_dot2_rows_f32(const float *w0, const float *w1, int64_t n_in, const float *x, int64_t ldx, int n, float *y0,
                      float *y1) {
    const float *x0 = x, *x1 = x + (n > 1 ? 1 : 0) * ldx, *x2 = x + (n > 2 ? 2 : 0) * ldx, *x3 = x + (n > 3 ? 3 : 0) * ldx;
    vf a0 = VF_SET1(0.0f), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t k = 0;
    for (; k + VW <= n_in; k += VW) {
        const vf u = VF_LOAD(w0 + k), v = VF_LOAD(w1 + k);
        vf t = VF_LOAD(x0 + k);
        a0 = VF_FMA(u, t, a0);
        b0 = VF_FMA(v, t, b0);
        t = VF_LOAD(x1 + k);
        a1 = VF_FMA(u, t, a1);
        b1 = VF_FMA(v, t, b1);
        t = VF_LOAD(x2 + k);
        a2 = VF_FMA(u, t, a2);
        b2 = VF_FMA(v, t, b2);
        t = VF_LOAD(x3 + k);
        a3 = VF_FMA(u, t, a3);
        b3 = VF_FMA(v, t, b3);
    }
    float s[4] = {VF_SUM(a0), VF_SUM(a1), VF_SUM(a2), VF_SUM(a3)}, r[4] = {VF_SUM(b0), VF_SUM(b1), VF_SUM(b2), VF_SUM(b3)};
    const float *xs[4] = {x0, x1, x2, x3};
    for (; k < n_in; k++)
        for (int j = 0; j < 4; j++) {
            s[j] += w0[k] * xs[j][k];
            r[j] += w1[k] * xs[j][k];
        }
    for (int j = 0; j < n; j++) {
        y0[j] = s[j];
        y1[j] = r[j];
    }
}
