/* The one-row product of a canonical weight row (lp.h) with a prepared activation row r:
 *   y = sum over blocks b of 32 [ (p_b0 + p_b1) * (d16[2b] s_b) ]            g16 = 0
 *       sum over 16-groups g  [ p_g * (d16[g] s_{g/2}) ]                      g16 = 1
 *     + sum over 16-groups g  [ m16[g] sum16_g(x) ]                           has_min
 * where p_g is the exact integer dot of the group's 16 int8 weights with its 16 int16
 * activations.  Every ISA computes the same integers; the fp32 sums differ only in order.
 * Paths: AVX-512 (one block of 32 int16 per zmm; vpdpwssd with VNNI), AVX2 (two ymm per block,
 * vpmaddwd), NEON (vmull/vmlal on int16, or with the dot-product extension two sdot per 16:
 * xq = 256 qh + ql), portable C.  (On x86 the common types take row1_x86.c's paths instead,
 * straight from the blocks; this one serves the rest.) */
#include "dot.h"

/* m16 . sum16 of row r (the minimum's share). */
static float min_term(const float *m16, const float *sum16, int64_t ng) {
    float t = 0.0f;
#pragma omp simd reduction(+ : t)
    for (int64_t g = 0; g < ng; g++) t += m16[g] * sum16[g];
    return t;
}

#if defined(LP_AVX512)
static float int_dot(int g16, lp_wrow w, const lp_xrows *xr, int64_t r) {
    const int64_t n_in = xr->n_in, nb = n_in / 32;
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m512i wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w.q + 32 * b)));
        const __m512 dv = g16 ? _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(w.d16 + 2 * b)))))
                              : _mm512_set1_ps(w.d16[2 * b]);
        const __m512i xv = _mm512_loadu_si512(xr->q + r * n_in + 32 * b);
        const __m512i p = lp_dpwssd512(_mm512_setzero_si512(), wv, xv);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dv, _mm512_set1_ps(xr->s[r * nb + b])), acc);
    }
    return _mm512_reduce_add_ps(acc);
}
#elif defined(LP_AVX2)
static float int_dot(int g16, lp_wrow w, const lp_xrows *xr, int64_t r) {
    const int64_t n_in = xr->n_in, nb = n_in / 32;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i w8 = _mm256_loadu_si256((const __m256i *)(w.q + 32 * b));
        const __m256i wl = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w8));
        const __m256i wh = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(w8, 1));
        const int16_t *xq = xr->q + r * n_in + 32 * b;
        const float s = xr->s[r * nb + b];
        const __m256i pl = _mm256_madd_epi16(wl, _mm256_loadu_si256((const __m256i *)xq));
        const __m256i ph = _mm256_madd_epi16(wh, _mm256_loadu_si256((const __m256i *)(xq + 16)));
        if (g16) {
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pl), _mm256_set1_ps(w.d16[2 * b] * s), acc);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ph), _mm256_set1_ps(w.d16[2 * b + 1] * s), acc);
        } else {
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(pl, ph)), _mm256_set1_ps(w.d16[2 * b] * s), acc);
        }
    }
    return VF_SUM(acc);
}
#elif defined(LP_NEON)
/* The exact int32x4 partial dot of 16 weights w (int8x16) with the activations at off. */
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

static float int_dot(int g16, lp_wrow w, const lp_xrows *xr, int64_t r) {
    const int64_t n_in = xr->n_in, nb = n_in / 32;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const int8x16_t wl = vld1q_s8(w.q + 32 * b), wh = vld1q_s8(w.q + 32 * b + 16);
        const int64_t off = r * n_in + 32 * b;
        const float s = xr->s[r * nb + b];
        const int32x4_t pl = dot16_neon(wl, xr, off), ph = dot16_neon(wh, xr, off + 16);
        if (g16) {
            acc = vfmaq_n_f32(acc, vcvtq_f32_s32(pl), w.d16[2 * b] * s);
            acc = vfmaq_n_f32(acc, vcvtq_f32_s32(ph), w.d16[2 * b + 1] * s);
        } else {
            acc = vfmaq_n_f32(acc, vcvtq_f32_s32(vaddq_s32(pl, ph)), w.d16[2 * b] * s);
        }
    }
    return vaddvq_f32(acc);
}
#else
static float int_dot(int g16, lp_wrow w, const lp_xrows *xr, int64_t r) {
    const int64_t n_in = xr->n_in, nb = n_in / 32;
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
    return acc;
}
#endif

float lp_dot_row(int g16, int has_min, lp_wrow w, const lp_xrows *xr, int64_t r) {
    const float y = int_dot(g16, w, xr, r);
    const int64_t ng = xr->n_in / 16;
    return has_min ? y + min_term(w.m16, xr->sum16 + r * ng, ng) : y;
}

/* VW weights at w + k of a float row kind (LP_WF32 / LP_WF16 / LP_WBF16) as floats, and one. */
LP_INLINE vf load_w(const void *w, int64_t k, const int kind) {
    if (kind == LP_WF16) return VF_LOADH((const uint16_t *)w + k);
    if (kind == LP_WBF16) return VF_LOADB((const uint16_t *)w + k);
    return VF_LOAD((const float *)w + k);
}
LP_INLINE float load_w1(const void *w, int64_t k, const int kind) {
    if (kind == LP_WF16) return lp_f16_to_f32(((const uint16_t *)w)[k]);
    if (kind == LP_WBF16) return lp_bf16_to_f32(((const uint16_t *)w)[k]);
    return ((const float *)w)[k];
}

/* The tile of lp_dot_tile_f32 for exactly NR activation rows and weight rows of one float kind
 * (constants once inlined, so the loops unroll and only NR x LP_TW accumulators are live; f16
 * and bf16 rows are widened in registers as they stream in): no row is computed twice. */
LP_INLINE void tile_f32(const void *const *ws, const float *const *xs, int64_t n_in, const int NR, const int kind,
                        float *s) {
    vf acc[LP_TW][LP_TX];
#pragma GCC unroll 8
    for (int j = 0; j < LP_TW; j++)
#pragma GCC unroll 8
        for (int i = 0; i < NR; i++) acc[j][i] = VF_SET1(0.0f);
    int64_t k = 0;
    for (; k + VW <= n_in; k += VW) {
        vf wv[LP_TW];
#pragma GCC unroll 8
        for (int j = 0; j < LP_TW; j++) wv[j] = load_w(ws[j], k, kind);
#pragma GCC unroll 8
        for (int i = 0; i < NR; i++) {
            const vf xv = VF_LOAD(xs[i] + k);
#pragma GCC unroll 8
            for (int j = 0; j < LP_TW; j++) acc[j][i] = VF_FMA(wv[j], xv, acc[j][i]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < LP_TW; j++)
#pragma GCC unroll 8
        for (int i = 0; i < NR; i++) s[LP_TX * j + i] = VF_SUM(acc[j][i]);
    for (; k < n_in; k++)
        for (int j = 0; j < LP_TW; j++)
            for (int i = 0; i < NR; i++) s[LP_TX * j + i] += load_w1(ws[j], k, kind) * xs[i][k];
}

#define LP_PF_ELEMS 1024 /* prefetch distance in weights (2 KiB of f16): matmul_rows --stream, 5-8 rows, 256-2048 tried */

/* w . x_i for one weight row of a float kind against NR (1..LP_FROWS) activation rows, the
 * weight row read as one sequential stream: one row at a time is what the prefetchers stream
 * fastest, where a tile's LP_TW interleaved rows, or widening a row into a buffer first, lose
 * a third to a half of the bandwidth (benchmarks/matmul_rows.py --stream).  U accumulators per
 * activation row keep U * NR FMA chains independent. */
LP_INLINE void rows_float(const void *w, const float *const *xs, int64_t n_in, const int NR, const int kind, float *y) {
    enum { UMAX = 4 };
    const int U = NR <= 2 ? 4 : NR <= 4 ? 2 : 1;
    vf acc[LP_FROWS][UMAX];
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++)
#pragma GCC unroll 4
        for (int u = 0; u < UMAX; u++) acc[i][u] = VF_SET1(0.0f);
    int64_t k = 0;
    const int64_t wsz = kind == LP_WF32 ? 4 : 2;
    for (; k + U * VW <= n_in; k += U * VW) {
        if (NR > 2) LP_PREFETCH_W((const char *)w + (k + LP_PF_ELEMS) * wsz);
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            const vf wv = load_w(w, k + u * VW, kind);
#pragma GCC unroll 8
            for (int i = 0; i < NR; i++) acc[i][u] = VF_FMA(wv, VF_LOAD(xs[i] + k + u * VW), acc[i][u]);
        }
    }
    for (; k + VW <= n_in; k += VW) {
        const vf wv = load_w(w, k, kind);
#pragma GCC unroll 8
        for (int i = 0; i < NR; i++) acc[i][0] = VF_FMA(wv, VF_LOAD(xs[i] + k), acc[i][0]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++) {
        y[i] = VF_SUM(VF_ADD(VF_ADD(acc[i][0], acc[i][1]), VF_ADD(acc[i][2], acc[i][3])));
        for (int64_t j = k; j < n_in; j++) y[i] += load_w1(w, j, kind) * xs[i][j];
    }
}

/* rows_float for two weight rows w0, w1 against NR (1..LP_FROWS) rows: each activation load
 * feeds both (loads, not FMAs, bound the one-row form at several rows), each weight stream
 * prefetched ahead (two interleaved streams lose the hardware prefetchers).  One FMA chain per
 * row and weight row, as rows_float from LP_F32_ROWS rows: the same sums, bit for bit (mm.c's
 * row groups take any NR for that chain). */
LP_INLINE void rows_float2(const void *w0, const void *w1, const float *const *xs, int64_t n_in, const int NR,
                           const int kind, float *y0, float *y1) {
    vf a0[LP_FROWS], a1[LP_FROWS];
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++) a0[i] = a1[i] = VF_SET1(0.0f);
    int64_t k = 0;
    const int64_t wsz = kind == LP_WF32 ? 4 : 2;
    for (; k + VW <= n_in; k += VW) {
        LP_PREFETCH_W((const char *)w0 + (k + LP_PF_ELEMS) * wsz);
        LP_PREFETCH_W((const char *)w1 + (k + LP_PF_ELEMS) * wsz);
        const vf v0 = load_w(w0, k, kind), v1 = load_w(w1, k, kind);
#pragma GCC unroll 8
        for (int i = 0; i < NR; i++) {
            vf xv = VF_LOAD(xs[i] + k);
            LP_IN_REG(xv); /* one load for both FMAs (GCC would fold it into each as a memory operand) */
            a0[i] = VF_FMA(v0, xv, a0[i]);
            a1[i] = VF_FMA(v1, xv, a1[i]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++) {
        y0[i] = VF_SUM(a0[i]);
        y1[i] = VF_SUM(a1[i]);
        for (int64_t j = k; j < n_in; j++) {
            y0[i] += load_w1(w0, j, kind) * xs[i][j];
            y1[i] += load_w1(w1, j, kind) * xs[i][j];
        }
    }
}

#define ROWS_FLOAT2(kind)                                                                                             \
    switch (n) {                                                                                                      \
    case 1: rows_float2(w, w1, xs, n_in, 1, kind, y, y + LP_FROWS); break;                                            \
    case 2: rows_float2(w, w1, xs, n_in, 2, kind, y, y + LP_FROWS); break;                                            \
    case 3: rows_float2(w, w1, xs, n_in, 3, kind, y, y + LP_FROWS); break;                                            \
    case 4: rows_float2(w, w1, xs, n_in, 4, kind, y, y + LP_FROWS); break;                                            \
    case 5: rows_float2(w, w1, xs, n_in, 5, kind, y, y + LP_FROWS); break;                                            \
    case 6: rows_float2(w, w1, xs, n_in, 6, kind, y, y + LP_FROWS); break;                                            \
    case 7: rows_float2(w, w1, xs, n_in, 7, kind, y, y + LP_FROWS); break;                                            \
    default: rows_float2(w, w1, xs, n_in, LP_FROWS, kind, y, y + LP_FROWS); break;                                    \
    }

#define ROWS_FLOAT(kind)                                                                                              \
    switch (n) {                                                                                                      \
    case 1: rows_float(w, xs, n_in, 1, kind, y); break;                                                               \
    case 2: rows_float(w, xs, n_in, 2, kind, y); break;                                                               \
    case 3: rows_float(w, xs, n_in, 3, kind, y); break;                                                               \
    case 4: rows_float(w, xs, n_in, 4, kind, y); break;                                                               \
    case 5: rows_float(w, xs, n_in, 5, kind, y); break;                                                               \
    case 6: rows_float(w, xs, n_in, 6, kind, y); break;                                                               \
    case 7: rows_float(w, xs, n_in, 7, kind, y); break;                                                               \
    default: rows_float(w, xs, n_in, LP_FROWS, kind, y); break;                                                       \
    }

#define FLOAT_KINDS(ROWS)                                                                                             \
    if (kind == LP_WF16) {                                                                                            \
        ROWS(LP_WF16)                                                                                                 \
    } else if (kind == LP_WBF16) {                                                                                    \
        ROWS(LP_WBF16)                                                                                                \
    } else {                                                                                                          \
        ROWS(LP_WF32)                                                                                                 \
    }

/* y[i] = w . x_i for one weight row w of a float kind and n (1..LP_FROWS) activation rows of
 * stride ldx; with a second row w1 (NULL: none; n 1..LP_FROWS2) also y[LP_FROWS + i] = w1 . x_i:
 * then each sum one FMA chain, whatever n (at LP_F32_ROWS rows or more, w1 NULL gives the same
 * sums). */
void lp_dot_float_rows(int kind, const void *w, const void *w1, const float *x, int64_t ldx, int64_t n_in, int n,
                       float *y) {
    const float *xs[LP_FROWS];
    for (int i = 0; i < LP_FROWS; i++) xs[i] = x + (i < n ? i : 0) * ldx;
    if (w1) {
        FLOAT_KINDS(ROWS_FLOAT2)
    } else {
        FLOAT_KINDS(ROWS_FLOAT)
    }
}

#define TILE_ROWS(kind)                                                                                               \
    switch (n) {                                                                                                      \
    case 1: tile_f32(ws, xs, n_in, 1, kind, s); break;                                                                \
    case 2: tile_f32(ws, xs, n_in, 2, kind, s); break;                                                                \
    case 3: tile_f32(ws, xs, n_in, 3, kind, s); break;                                                                \
    TILE_ROWS_WIDE(kind)                                                                                              \
    default: tile_f32(ws, xs, n_in, LP_TX, kind, s); break;                                                           \
    }
#if LP_TX > 4
#define TILE_ROWS_WIDE(kind)                                                                                          \
    case 4: tile_f32(ws, xs, n_in, 4, kind, s); break;                                                                \
    case 5: tile_f32(ws, xs, n_in, 5, kind, s); break;
#else
#define TILE_ROWS_WIDE(kind)
#endif

/* y[j * LP_TX + i] = w_j . x_i in fp32 for nw <= LP_TW weight rows w[j] of a float kind (fp32,
 * or f16 / bf16 read straight from the file: the products are the same as on the widened
 * rows) and n <= LP_TX activation rows x_i (stride ldx): exact products, vectorized sums, an
 * LP_TW x n tile of accumulators in registers (AVX-512 and NEON have 32: up to 4 x 6; AVX2 16:
 * 3 x 4), so each weight load feeds n products and each activation load LP_TW.  Weight rows
 * past nw repeat the first (computed, not stored). */
void lp_dot_tile_f32(int kind, const void *const *w, int nw, int64_t n_in, const float *x, int64_t ldx, int n,
                     float *y) {
    const void *ws[LP_TW];
    const float *xs[LP_TX];
    for (int j = 0; j < LP_TW; j++) ws[j] = w[j < nw ? j : 0];
    for (int i = 0; i < LP_TX; i++) xs[i] = x + (i < n ? i : 0) * ldx;
    float s[LP_TW * LP_TX];
    if (kind == LP_WF16) {
        TILE_ROWS(LP_WF16)
    } else if (kind == LP_WBF16) {
        TILE_ROWS(LP_WBF16)
    } else {
        TILE_ROWS(LP_WF32)
    }
    for (int j = 0; j < nw; j++)
        for (int i = 0; i < n; i++) y[LP_TX * j + i] = s[LP_TX * j + i];
}

#if defined(LP_BF16)
/* The bf16 form of lp_dot_tile_f32 (AVX512-BF16: vdpbf16ps, 32 products per instruction,
 * fp32 sums): w[j] and x rows as bf16, n_in a multiple of 32. */
void lp_dot_tile_bf16(const uint16_t *const *w, int nw, int64_t n_in, const uint16_t *x, int64_t ldx, int n, float *y) {
    const uint16_t *w0 = w[0], *w1 = w[nw > 1 ? 1 : 0], *w2 = w[nw > 2 ? 2 : 0];
    const uint16_t *xs[4] = {x, x + (n > 1 ? 1 : 0) * ldx, x + (n > 2 ? 2 : 0) * ldx, x + (n > 3 ? 3 : 0) * ldx};
    __m512 a[3][4];
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 4; i++) a[j][i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n_in; k += 32) {
        const __m512bh u = (__m512bh)_mm512_loadu_si512(w0 + k), v = (__m512bh)_mm512_loadu_si512(w1 + k);
        const __m512bh t = (__m512bh)_mm512_loadu_si512(w2 + k);
        for (int i = 0; i < 4; i++) {
            const __m512bh xx = (__m512bh)_mm512_loadu_si512(xs[i] + k);
            a[0][i] = _mm512_dpbf16_ps(a[0][i], u, xx);
            a[1][i] = _mm512_dpbf16_ps(a[1][i], v, xx);
            a[2][i] = _mm512_dpbf16_ps(a[2][i], t, xx);
        }
    }
    for (int j = 0; j < nw; j++)
        for (int i = 0; i < n; i++) y[LP_TX * j + i] = _mm512_reduce_add_ps(a[j][i]);
}

/* f32 -> bf16, round to nearest even, 32 at a time (n a multiple of 32). */
void lp_to_bf16(const float *x, int64_t n, uint16_t *out) {
    for (int64_t k = 0; k < n; k += 32)
        _mm512_storeu_si512(out + k, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k)));
}
#endif
