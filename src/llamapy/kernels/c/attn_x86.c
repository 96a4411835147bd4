/* Attention of one query row's group of hpt heads (sharing a KV head) over its visible cells,
 * x86 with 256-bit vectors (AVX2 and the AVX-512 level): the scores of up to 4 heads in one pass
 * over the K rows (each K row widened once for them; 8 accumulators: 1 head x 8 cells .. 4 x 2,
 * reduced together), the softmax's exponentials 8 at a time (lp.h lp_exp8), and the
 * softmax-weighted sum of V rows with the output dims of up to 4 heads in registers per pass (4
 * heads x 24 dims, else up to 3 x 32).  K and V rows are f16 (the cache's own), or f32 (a
 * block-typed cache's rows dequantized by attn.c).
 * The same scores, softmax and sums as attn.c's generic attn_group, in another order; each
 * (head, cell) score and output value the same bits however many heads share a pass. */
#include "attn_x86.h"

#if defined(LP_AVX2) || defined(LP_AVX512)

LP_INLINE __m256 hsum8x(const __m256 *a) { /* [sum a[0], ..., sum a[7]] */
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

LP_INLINE __m256 loadh8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* 8 K or V values from element i of a cache row: f16, or f32 (f32: rows of a block-typed cache
 * dequantized by attn.c) */
LP_INLINE __m256 load8(const void *base, int64_t i, const int f32) {
    return f32 ? _mm256_loadu_ps((const float *)base + i) : loadh8((const uint16_t *)base + i);
}

#define ATTN_PF_CELLS 64 /* how far ahead (cells) the first head's pass asks for K rows */

/* The cache lines of n bytes at p, on their way into the caches (a decode row's cells were
 * last read a token ago: the weights streamed since have evicted them, and a KV head's part of
 * each cell's row, a few lines every ldk, is a pattern the hardware prefetchers follow poorly). */
LP_INLINE void prefetch_row(const void *p, int64_t n) {
    for (int64_t b = 0; b < n; b += 64) _mm_prefetch((const char *)p + b, _MM_HINT_T1);
}

/* Cells a scores pass reads for nh (1..4) heads: nh x cells accumulators, 8 at most. */
#define SCORE_CELLS(nh) ((nh) == 1 ? 8 : (nh) == 2 ? 4 : 2)

/* Scores of nh (1..4) heads (q0 + h d_k, d_k floats each) against cells[0..nc8) (nc8 a multiple
 * of 8) into p + h nc, raising mx[h] to each head's max: each K row read (and widened from f16)
 * once for the nh heads, where a head at a time read it nh times (Zen 3: vcvtph2ps, one a cycle,
 * had bound the scores).  Each (head, cell)'s sum is one FMA chain over the head dimension in 8
 * lanes, reduced by hsum8x, then * scale + mask by one FMA: a head alone's bits (nh 1 was this
 * file's only pass).  pf (the first heads over an f16 cache): K rows ATTN_PF_CELLS cells ahead,
 * and the V rows (v, ldv, d_v) of the cells being scored, which weighted_v reads after the
 * softmax, prefetched as it goes. */
LP_INLINE void scores_heads(const int nh, const float *q0, int64_t d_k, const void *k, int64_t ldk, const float *mi,
                            const int64_t *cells, int64_t nc8, int64_t nc, float scale, float *p, float *mx, const int f32,
                            const int pf, const void *v, int64_t ldv, int64_t d_v) {
    const int P = SCORE_CELLS(nh);
    __m256 mxv = _mm256_set1_ps(-INFINITY);
    if (pf)
        for (int64_t c = 0; c < ATTN_PF_CELLS && c < nc; c++) prefetch_row((const uint16_t *)k + cells[c] * ldk, d_k * 2);
    for (int64_t c0 = 0; c0 < nc8; c0 += P) {
        __m256 acc[8];
        int64_t kr[8];
        if (pf)
            for (int i = 0; i < P; i++) {
                if (c0 + ATTN_PF_CELLS + i < nc) prefetch_row((const uint16_t *)k + cells[c0 + ATTN_PF_CELLS + i] * ldk, d_k * 2);
                prefetch_row((const uint16_t *)v + cells[c0 + i] * ldv, d_v * 2);
            }
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int i = 0; i < P; i++) kr[i] = cells[c0 + i] * ldk;
        for (int64_t j = 0; j < d_k; j += 8) {
            __m256 qv[4];
#pragma GCC unroll 4
            for (int h = 0; h < nh; h++) qv[h] = _mm256_loadu_ps(q0 + h * d_k + j);
#pragma GCC unroll 8
            for (int i = 0; i < P; i++) {
                const __m256 kv = load8(k, kr[i] + j, f32);
#pragma GCC unroll 4
                for (int h = 0; h < nh; h++) acc[h * P + i] = _mm256_fmadd_ps(qv[h], kv, acc[h * P + i]);
            }
        }
        float m8[8];
#pragma GCC unroll 8
        for (int a = 0; a < 8; a++) m8[a] = a < nh * P ? mi[cells[c0 + a % P]] : 0.0f;
        const __m256 sv = _mm256_fmadd_ps(hsum8x(acc), _mm256_set1_ps(scale), _mm256_loadu_ps(m8));
        mxv = _mm256_max_ps(mxv, sv);
        if (P == 8) { /* lane h P + i: head h, cell c0 + i */
            _mm256_storeu_ps(p + c0, sv);
        } else if (P == 4) {
            _mm_storeu_ps(p + c0, _mm256_castps256_ps128(sv));
            _mm_storeu_ps(p + nc + c0, _mm256_extractf128_ps(sv, 1));
        } else {
            const __m128 lo = _mm256_castps256_ps128(sv), hi = _mm256_extractf128_ps(sv, 1);
            _mm_storel_pi((__m64 *)(p + c0), lo);
            if (nh > 1) _mm_storeh_pi((__m64 *)(p + nc + c0), lo);
            if (nh > 2) _mm_storel_pi((__m64 *)(p + 2 * nc + c0), hi);
            if (nh > 3) _mm_storeh_pi((__m64 *)(p + 3 * nc + c0), hi);
        }
    }
    float t[8];
    _mm256_storeu_ps(t, mxv);
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < P; i++) mx[h] = t[h * P + i] > mx[h] ? t[h * P + i] : mx[h];
}

/* Head q's scores against the cells nc8 .. nc (fewer than 8) into p, raising *mx (the scalar
 * pass: its own reduction order, as before). */
LP_INLINE void scores_tail(const float *q, int64_t d_k, const void *k, int64_t ldk, const float *mi, const int64_t *cells,
                           int64_t nc8, int64_t nc, float scale, float *p, float *mx, const int f32, const int pf, const void *v,
                           int64_t ldv, int64_t d_v) {
    for (int64_t c0 = nc8; c0 < nc; c0++) {
        const int64_t kr = cells[c0] * ldk;
        if (pf) prefetch_row((const uint16_t *)v + cells[c0] * ldv, d_v * 2);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t j = 0; j < d_k; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + j), load8(k, kr + j, f32), acc);
        __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        const float sc = _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4))) * scale + mi[cells[c0]];
        p[c0] = sc;
        *mx = sc > *mx ? sc : *mx;
    }
}

/* p[0..nc) = exp(p - m) / sum (zeros where m is -inf: the row sees nothing); returns the sum. */
static float softmax(float *p, int64_t nc, float m) {
    if (m == -INFINITY) {
        memset(p, 0, (size_t)nc * sizeof(float));
        return 0.0f;
    }
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sv = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= nc; c += 8) {
        const __m256 e = lp_exp8(_mm256_sub_ps(_mm256_loadu_ps(p + c), mv));
        _mm256_storeu_ps(p + c, e);
        sv = _mm256_add_ps(sv, e);
    }
    float t[8], s = 0.0f;
    _mm256_storeu_ps(t, sv);
    for (int i = 0; i < 8; i++) s += t[i];
    for (; c < nc; c++) {
        p[c] = expf(p[c] - m);
        s += p[c];
    }
    const __m256 inv = _mm256_set1_ps(1.0f / s);
    for (c = 0; c + 8 <= nc; c += 8) _mm256_storeu_ps(p + c, _mm256_mul_ps(_mm256_loadu_ps(p + c), inv));
    for (; c < nc; c++) p[c] *= 1.0f / s;
    return s;
}

/* o[h * d_v + j] = sum_c p[h * nc + c] v_c[j] for nh heads and dims j0 .. j0 + 8 J (nh J <= 12
 * accumulators): each sum one FMA chain over the cells, whatever nh and J. */
LP_INLINE void weighted_v(const int nh, const int J, const float *p, int64_t nc, const void *v, int64_t ldv,
                          const int64_t *cells, int64_t d_v, int64_t j0, float *o, const int f32) {
    __m256 acc[4][4];
    for (int h = 0; h < nh; h++)
        for (int j = 0; j < J; j++) acc[h][j] = _mm256_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        const int64_t vr = cells[c] * ldv + j0;
        __m256 vv[4];
        for (int j = 0; j < J; j++) vv[j] = load8(v, vr + 8 * j, f32);
        for (int h = 0; h < nh; h++) {
            const __m256 w = _mm256_broadcast_ss(p + h * nc + c);
            for (int j = 0; j < J; j++) acc[h][j] = _mm256_fmadd_ps(w, vv[j], acc[h][j]);
        }
    }
    for (int h = 0; h < nh; h++)
        for (int j = 0; j < J; j++) _mm256_storeu_ps(o + h * d_v + j0 + 8 * j, acc[h][j]);
}

/* Heads h0 .. h0 + nh (nh 1..4) of the group: scores (K rows read once for the nh), softmax. */
LP_INLINE void scores_group(const int nh, const float *q0, int64_t d_k, const void *k, int64_t ldk, const float *mi,
                            const int64_t *cells, int64_t nc, float scale, float *p, float *ms, const int f32, const int pf,
                            const void *v, int64_t ldv, int64_t d_v) {
    const int64_t nc8 = nc & ~(int64_t)7;
    float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    scores_heads(nh, q0, d_k, k, ldk, mi, cells, nc8, nc, scale, p, mx, f32, pf, v, ldv, d_v);
    for (int h = 0; h < nh; h++) {
        scores_tail(q0 + h * d_k, d_k, k, ldk, mi, cells, nc8, nc, scale, p + h * nc, mx + h, f32, pf && h == 0, v, ldv, d_v);
        const float s = softmax(p + h * nc, nc, mx[h]);
        if (ms) ms[2 * h] = mx[h], ms[2 * h + 1] = s;
    }
}

/* Heads per pass: 4 (K and V rows read once for 4: Gemma 3, Llama 3's GQA groups of 4), or 3
 * where the group is a multiple of 3 and not of 4 (SmolLM2's), the rest in one pass.  Zen 3,
 * -t 1, 16 rows of 131 cells against a head at a time: 4 x 256 1.35x, 32 / 8 x 64 1.36x, 9 / 3
 * x 64 1.06x (1 row of 300: 1.21x, 1.32x, 0.99x); the scores' lanes stored as they lie. */
LP_INLINE int64_t heads_pass(int64_t hpt, int64_t h0) {
    const int64_t left = hpt - h0, g = hpt % 4 && hpt % 3 == 0 ? 3 : 4;
    return left < g ? left : g;
}

LP_INLINE void group(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const void *k, const void *v, int64_t ldk,
                     int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p, float *o,
                     float *ms, const int f32) {
    for (int64_t h0 = 0; h0 < hpt;) {
        const int64_t nh = heads_pass(hpt, h0);
        const float *q = q0 + h0 * d_k;
        float *ph = p + h0 * nc, *mh = ms ? ms + 2 * h0 : NULL;
        const int pf = !f32 && h0 == 0;
        if (nh == 4) scores_group(4, q, d_k, k, ldk, mi, cells, nc, scale, ph, mh, f32, pf, v, ldv, d_v);
        else if (nh == 3) scores_group(3, q, d_k, k, ldk, mi, cells, nc, scale, ph, mh, f32, pf, v, ldv, d_v);
        else if (nh == 2) scores_group(2, q, d_k, k, ldk, mi, cells, nc, scale, ph, mh, f32, pf, v, ldv, d_v);
        else scores_group(1, q, d_k, k, ldk, mi, cells, nc, scale, ph, mh, f32, pf, v, ldv, d_v);
        h0 += nh;
    }
    for (int64_t h0 = 0; h0 < hpt;) {
        const int64_t nh = heads_pass(hpt, h0);
        const float *ph = p + h0 * nc;
        float *oh = o + h0 * d_v;
        if (nh == 4) { /* 4 heads x 24 dims (12 accumulators: 8 had left the FMAs' latency no slack), then 16 or 8 */
            int64_t j0 = 0;
            for (; j0 + 24 <= d_v; j0 += 24) weighted_v(4, 3, ph, nc, v, ldv, cells, d_v, j0, oh, f32);
            if (d_v - j0 == 16) weighted_v(4, 2, ph, nc, v, ldv, cells, d_v, j0, oh, f32);
            else if (d_v - j0 == 8) weighted_v(4, 1, ph, nc, v, ldv, cells, d_v, j0, oh, f32);
        } else
            for (int64_t j0 = 0; j0 < d_v; j0 += 32) {
                if (nh == 3) weighted_v(3, 4, ph, nc, v, ldv, cells, d_v, j0, oh, f32);
                else if (nh == 2) weighted_v(2, 4, ph, nc, v, ldv, cells, d_v, j0, oh, f32);
                else weighted_v(1, 4, ph, nc, v, ldv, cells, d_v, j0, oh, f32);
            }
        h0 += nh;
    }
}

int lp_attn_group_x86(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const void *k, const void *v, int64_t ldk,
                      int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p, float *o,
                      float *ms, int f32) {
    if (d_k % 8 || d_v % 32) return 0;
    if (f32)
        group(q0, hpt, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, p, o, ms, 1);
    else
        group(q0, hpt, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, p, o, ms, 0);
    return 1;
}
#else
int lp_attn_group_x86(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const void *k, const void *v, int64_t ldk,
                      int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p, float *o,
                      float *ms, int f32) {
    (void)ms, (void)f32, (void)q0, (void)hpt, (void)d_k, (void)d_v, (void)k, (void)v, (void)ldk, (void)ldv, (void)mi, (void)cells, (void)nc;
    (void)scale, (void)p, (void)o;
    return 0;
}
#endif
