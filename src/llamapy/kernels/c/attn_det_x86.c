/* --deterministic's attention of one query row's group of hpt heads (sharing a KV head) over
 * its visible cells, f16 cache, 512-bit vectors.  A row's attention under the flag is this
 * function of that row alone (ops.c lp_attn_det_for: its own cells, chunks and merge), so any
 * order inside it is the row's own whatever the batch; this one is chosen for speed:
 *   scores: up to 4 heads x 4 cells a pass, each K row's 16 dims converted once for the 4
 *     heads (the one-row kernel attn_x86.c converts them per head, 8 at a time), the 16
 *     accumulators reduced by a transpose-add to 4 x 4 scores;
 *   softmax: 16 exponentials at a time (lp_exp16);
 *   weighted V: up to 4 heads x 64 dims in registers a pass over the cells.
 * The same scores, softmax and sums as ops.c's attn_group, in another order. */
#include "attn_det_x86.h"
#include "attn_det_avx2_x86.h"

#if defined(LP_AVX512)
#define DET_PF_CELLS 16 /* K rows asked for this many cells ahead */

LP_INLINE __m512 ldh16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* [sum a0, sum a1, sum a2, sum a3] (exact order fixed by the code) */
LP_INLINE __m128 hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 x = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1)); /* a0 a1 a0 a1 per 128 */
    const __m512 y = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE)); /* a0 a1 a2 a3 per 128 */
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(z), _mm512_extractf32x8_ps(z, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Scores of NH heads (q rows q, d_k apart) against cells[0..nc) into p[h nc + c]; mx[h]: their max. */
LP_INLINE void scores4(const int NH, const float *q, int64_t d_k, const uint16_t *k, int64_t ldk, const float *mi,
                       const int64_t *cells, int64_t nc, float scale, float *p, float *mx) {
    __m128 m4[4];
    for (int h = 0; h < NH; h++) m4[h] = _mm_set1_ps(-INFINITY);
    const __m128 sc = _mm_set1_ps(scale);
    for (int64_t c0 = 0; c0 < nc; c0 += 4) {
        const int nv = (int)(nc - c0 < 4 ? nc - c0 : 4);
        const uint16_t *kr[4];
        for (int i = 0; i < 4; i++) kr[i] = k + cells[c0 + (i < nv ? i : nv - 1)] * ldk;
        for (int i = 0; i < 4 && c0 + DET_PF_CELLS + i < nc; i++)
            for (int64_t b = 0; b < d_k * 2; b += 64) _mm_prefetch((const char *)(k + cells[c0 + DET_PF_CELLS + i] * ldk) + b, _MM_HINT_T0);
        __m512 acc[4][4];
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < 4; i++) acc[h][i] = _mm512_setzero_ps();
        for (int64_t j = 0; j < d_k; j += 16) {
            __m512 kv[4];
            for (int i = 0; i < 4; i++) kv[i] = ldh16(kr[i] + j);
            for (int h = 0; h < NH; h++) {
                const __m512 qv = _mm512_loadu_ps(q + h * d_k + j);
                for (int i = 0; i < 4; i++) acc[h][i] = _mm512_fmadd_ps(qv, kv[i], acc[h][i]);
            }
        }
        const __mmask8 valid = (__mmask8)((1u << nv) - 1);
        const __m128 mk = _mm_setr_ps(mi[cells[c0]], nv > 1 ? mi[cells[c0 + 1]] : 0.0f, nv > 2 ? mi[cells[c0 + 2]] : 0.0f,
                                      nv > 3 ? mi[cells[c0 + 3]] : 0.0f);
        for (int h = 0; h < NH; h++) {
            const __m128 s = _mm_fmadd_ps(hsum4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]), sc, mk);
            _mm_mask_storeu_ps(p + h * nc + c0, valid, s);
            m4[h] = _mm_mask_max_ps(m4[h], valid, m4[h], s);
        }
    }
    for (int h = 0; h < NH; h++) {
        __m128 m = _mm_max_ps(m4[h], _mm_movehl_ps(m4[h], m4[h]));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        mx[h] = _mm_cvtss_f32(m);
    }
}

/* p[0..nc) = exp(p - m) / sum (zeros where m is -inf: the row sees nothing); returns the sum. */
static float softmax16(float *p, int64_t nc, float m) {
    if (m == -INFINITY) {
        memset(p, 0, (size_t)nc * sizeof(float));
        return 0.0f;
    }
    const __m512 mv = _mm512_set1_ps(m);
    __m512 sv = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c += 16) {
        const __mmask16 k = nc - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nc - c)) - 1);
        const __m512 e = lp_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + c), mv));
        _mm512_mask_storeu_ps(p + c, k, e);
        sv = _mm512_mask_add_ps(sv, k, sv, e);
    }
    const float s = _mm512_reduce_add_ps(sv);
    const __m512 inv = _mm512_set1_ps(1.0f / s);
    for (int64_t c = 0; c < nc; c += 16) {
        const __mmask16 k = nc - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nc - c)) - 1);
        _mm512_mask_storeu_ps(p + c, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + c), inv));
    }
    return s;
}

/* o[h d_v + j] = sum_c p[h nc + c] v_c[j] for NH heads and dims j0 .. j0 + 64. */
LP_INLINE void weighted_v4(const int NH, const float *p, int64_t nc, const uint16_t *v, int64_t ldv, const int64_t *cells,
                           int64_t d_v, int64_t j0, float *o) {
    __m512 acc[4][4];
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < 4; j++) acc[h][j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        const uint16_t *vr = v + cells[c] * ldv + j0;
        if (c + DET_PF_CELLS < nc) _mm_prefetch((const char *)(v + cells[c + DET_PF_CELLS] * ldv + j0), _MM_HINT_T0),
                                   _mm_prefetch((const char *)(v + cells[c + DET_PF_CELLS] * ldv + j0) + 64, _MM_HINT_T0);
        __m512 vv[4];
        for (int j = 0; j < 4; j++) vv[j] = ldh16(vr + 16 * j);
        for (int h = 0; h < NH; h++) {
            const __m512 w = _mm512_set1_ps(p[h * nc + c]);
            for (int j = 0; j < 4; j++) acc[h][j] = _mm512_fmadd_ps(w, vv[j], acc[h][j]);
        }
    }
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < 4; j++) _mm512_storeu_ps(o + h * d_v + j0 + 16 * j, acc[h][j]);
}

LP_INLINE void group4(const int NH, const float *q, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                      int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                      float *o, float *ms) {
    float mx[4];
    scores4(NH, q, d_k, k, ldk, mi, cells, nc, scale, p, mx);
    for (int h = 0; h < NH; h++) {
        const float s = softmax16(p + h * nc, nc, mx[h]);
        if (ms) ms[2 * h] = mx[h], ms[2 * h + 1] = s;
    }
    for (int64_t j0 = 0; j0 < d_v; j0 += 64) weighted_v4(NH, p, nc, v, ldv, cells, d_v, j0, o);
}

int lp_attn_group_det(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                      int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                      float *o, float *ms) {
    if (d_k % 16 || d_v % 64) return 0;
    for (int64_t h0 = 0; h0 < hpt; h0 += 4) { /* heads in fours: p, o and ms from head h0 */
        const int nh = (int)(hpt - h0 < 4 ? hpt - h0 : 4);
        const float *q = q0 + h0 * d_k;
        float *ph = p + h0 * nc, *oh = o + h0 * d_v, *mh = ms ? ms + 2 * h0 : NULL;
        switch (nh) {
        case 4: group4(4, q, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, ph, oh, mh); break;
        case 3: group4(3, q, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, ph, oh, mh); break;
        case 2: group4(2, q, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, ph, oh, mh); break;
        default: group4(1, q, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, ph, oh, mh); break;
        }
    }
    return 1;
}
#elif defined(LP_AVX2) /* the AVX2 level: attn_det_avx2_x86.c */
int lp_attn_group_det(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                      int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                      float *o, float *ms) {
    return lp_attn_group_det256(q0, hpt, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, p, o, ms);
}
#else
int lp_attn_group_det(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                      int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                      float *o, float *ms) {
    (void)q0, (void)hpt, (void)d_k, (void)d_v, (void)k, (void)v, (void)ldk, (void)ldv, (void)mi, (void)cells, (void)nc;
    (void)scale, (void)p, (void)o, (void)ms;
    return 0;
}
#endif
