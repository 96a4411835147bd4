/* --deterministic's attention of one query row's group of hpt heads over its visible cells, f16
 * cache, 256-bit vectors (the AVX2 level): attn_det_x86.c's contract and plan on 16 ymm
 * registers.  A row's attention under the flag is this function of that row alone (attn.c
 * lp_attn_det_for: its own cells, chunks and merge), so any order inside it is the row's own
 * whatever the batch (the AVX2 level is its own deterministic world: not the AVX-512 order):
 *   scores: heads in fours, 4 heads x 3 cells a pass (3 heads or fewer: 4 cells), each K row's
 *     8 dims converted once for the heads sharing it (attn_x86.c converts them per head), the
 *     accumulators reduced by a transpose-add to a score per (head, cell); whole passes stored
 *     plainly (masked stores only in the tail pass); the V rows of a pass's cells asked for as it
 *     goes (a decode's cache lines are cold: the V loads had stalled most of the kernel);
 *   softmax: the group's heads at once, 8 exponentials a step (lp_exp8), the tail masked (its
 *     lanes add 0), not normalized: each head's weighted sums are scaled by 1 / sum at the end
 *     (one pass over the scores fewer);
 *   weighted V: 3 heads or fewer: 32 dims a pass, the heads' weights in registers and each V
 *     vector converted once for them; 4 heads: 24 dims a pass, one weight at a time (as
 *     attn_x86.c: 16 dims a pass had read each V row 16 times for Gemma 3's heads of 256).
 * The same scores, softmax and sums as attn.c's attn_group, in another order. */
#include "attn_det_avx2_x86.h"

#if defined(LP_AVX2) && !defined(LP_AVX512)
#define DET_PF_CELLS 16 /* K rows asked for this many cells ahead */

LP_INLINE void pf_row(const uint16_t *r, int64_t n) { /* n halves from r on their way into L1 */
    for (int64_t b = 0; b < n * 2; b += 64) _mm_prefetch((const char *)r + b, _MM_HINT_T0);
}

LP_INLINE __m256 ldh8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* [sum a0, sum a1, sum a2, sum a3] (the order fixed by the code) */
LP_INLINE __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 x = _mm256_hadd_ps(a0, a1), y = _mm256_hadd_ps(a2, a3); /* a0 a0 a1 a1 | a2 a2 a3 a3 per 128 */
    const __m256 z = _mm256_hadd_ps(x, y);                              /* a0 a1 a2 a3 per 128 */
    return _mm_add_ps(_mm256_castps256_ps128(z), _mm256_extractf128_ps(z, 1));
}

LP_INLINE __m128i lanes_below(int n) { /* lanes 0..n-1 of 4 set */
    return _mm_cmpgt_epi32(_mm_set1_epi32(n), _mm_setr_epi32(0, 1, 2, 3));
}

/* Scores of NH heads (q rows d_k apart) against cells[0..nc) into p[h nc + c], CP cells a
 * pass (NH x CP <= 12 accumulators); mx[h]: their max.  A cell's score is its own FMA chain over
 * the dims (8 lanes, j ascending) and hsum4's tree, whatever its slot.  Each pass asks for the V
 * rows of its cells (the weighted sums read them next) and the K rows DET_PF_CELLS cells on. */
LP_INLINE void scores_det(const int NH, const int CP, const float *q, int64_t d_k, const uint16_t *k, int64_t ldk,
                          const float *mi, const int64_t *cells, int64_t nc, float scale, float *p, float *mx,
                          const uint16_t *v, int64_t ldv, int64_t d_v) {
    __m128 m4[4];
    for (int h = 0; h < NH; h++) m4[h] = _mm_set1_ps(-INFINITY);
    const __m128 sc = _mm_set1_ps(scale), lo = _mm_set1_ps(-INFINITY);
    for (int64_t c = 0; c < DET_PF_CELLS && c < nc; c++) pf_row(k + cells[c] * ldk, d_k);
    for (int64_t c0 = 0; c0 < nc; c0 += CP) {
        const int nv = (int)(nc - c0 < CP ? nc - c0 : CP);
        const uint16_t *kr[4];
        for (int i = 0; i < CP; i++) kr[i] = k + cells[c0 + (i < nv ? i : nv - 1)] * ldk;
        for (int i = 0; i < nv; i++) {
            if (c0 + DET_PF_CELLS + i < nc) pf_row(k + cells[c0 + DET_PF_CELLS + i] * ldk, d_k);
            pf_row(v + cells[c0 + i] * ldv, d_v);
        }
        __m256 acc[4][4];
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < 4; i++) acc[h][i] = _mm256_setzero_ps();
        for (int64_t j = 0; j < d_k; j += 8)
            for (int i = 0; i < CP; i++) {
                const __m256 kv = ldh8(kr[i] + j);
                for (int h = 0; h < NH; h++) acc[h][i] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * d_k + j), kv, acc[h][i]);
            }
        const __m128 mk = _mm_setr_ps(mi[cells[c0]], nv > 1 ? mi[cells[c0 + 1]] : 0.0f,
                                      nv > 2 ? mi[cells[c0 + 2]] : 0.0f, nv > 3 ? mi[cells[c0 + 3]] : 0.0f);
        if (nv == 4) /* a whole pass of 4 cells: plain stores (4 heads' passes of 3 stay masked: their plain
                      * 4-float stores over the next pass's cell measured Gemma 3's shape 1.05-1.11x slower) */
            for (int h = 0; h < NH; h++) {
                const __m128 s = _mm_fmadd_ps(hsum4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]), sc, mk);
                _mm_storeu_ps(p + h * nc + c0, s);
                m4[h] = _mm_max_ps(m4[h], s);
            }
        else {
            const __m128i valid = lanes_below(nv);
            for (int h = 0; h < NH; h++) {
                const __m128 s = _mm_fmadd_ps(hsum4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]), sc, mk);
                _mm_maskstore_ps(p + h * nc + c0, valid, s);
                m4[h] = _mm_max_ps(m4[h], _mm_blendv_ps(lo, s, _mm_castsi128_ps(valid)));
            }
        }
    }
    for (int h = 0; h < NH; h++) {
        __m128 m = _mm_max_ps(m4[h], _mm_movehl_ps(m4[h], m4[h]));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        mx[h] = _mm_cvtss_f32(m);
    }
}

/* The sum of a's 8 lanes (the order fixed by the code). */
LP_INLINE float hsum8(__m256 a) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
}

/* p[h nc + c] = exp(p - mx[h]) for NH heads at once (zeros where mx[h] is -inf: the head sees
 * nothing), 8 cells a step, the tail masked (its lanes add 0); s[h]: each head's sum.  Not
 * normalized: weighted_v_det scales the sums by 1 / s[h]. */
LP_INLINE void softmax_det(const int NH, float *p, int64_t nc, const float *mx, float *s) {
    __m256 mv[4], sv[4];
    for (int h = 0; h < NH; h++) mv[h] = _mm256_set1_ps(mx[h] == -INFINITY ? INFINITY : mx[h]), sv[h] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= nc; c += 8)
        for (int h = 0; h < NH; h++) {
            const __m256 e = lp_exp8(_mm256_sub_ps(_mm256_loadu_ps(p + h * nc + c), mv[h]));
            _mm256_storeu_ps(p + h * nc + c, e);
            sv[h] = _mm256_add_ps(sv[h], e);
        }
    if (c < nc) {
        const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nc - c)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int h = 0; h < NH; h++) {
            const __m256 x = _mm256_maskload_ps(p + h * nc + c, k);
            const __m256 e = _mm256_and_ps(lp_exp8(_mm256_sub_ps(x, mv[h])), _mm256_castsi256_ps(k));
            _mm256_maskstore_ps(p + h * nc + c, k, e);
            sv[h] = _mm256_add_ps(sv[h], e);
        }
    }
    for (int h = 0; h < NH; h++) s[h] = hsum8(sv[h]);
}

/* o[h d_v + j] = (sum_c p[h nc + c] v_c[j]) inv[h] for NH heads and dims j0 .. j0 + 8 JW.  W (NH
 * <= 3): the NH weights in registers, each V vector converted once for them (NH JW + NH + 1
 * <= 16); else one weight at a time, JW V vectors in registers (NH JW + JW + 1 <= 16). */
LP_INLINE void weighted_v_det(const int NH, const int JW, const int W, const float *p, int64_t nc, const uint16_t *v,
                              int64_t ldv, const int64_t *cells, int64_t d_v, int64_t j0, const float *inv, float *o) {
    __m256 acc[4][4];
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < JW; j++) acc[h][j] = _mm256_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        const uint16_t *vr = v + cells[c] * ldv + j0;
        if (W) {
            __m256 w[4];
            for (int h = 0; h < NH; h++) w[h] = _mm256_broadcast_ss(p + h * nc + c);
            for (int j = 0; j < JW; j++) {
                const __m256 vv = ldh8(vr + 8 * j);
                for (int h = 0; h < NH; h++) acc[h][j] = _mm256_fmadd_ps(w[h], vv, acc[h][j]);
            }
        } else {
            __m256 vv[4];
            for (int j = 0; j < JW; j++) vv[j] = ldh8(vr + 8 * j);
            for (int h = 0; h < NH; h++) {
                const __m256 w = _mm256_broadcast_ss(p + h * nc + c);
                for (int j = 0; j < JW; j++) acc[h][j] = _mm256_fmadd_ps(w, vv[j], acc[h][j]);
            }
        }
    }
    for (int h = 0; h < NH; h++) {
        const __m256 iv = _mm256_set1_ps(inv[h]);
        for (int j = 0; j < JW; j++) _mm256_storeu_ps(o + h * d_v + j0 + 8 * j, _mm256_mul_ps(acc[h][j], iv));
    }
}

LP_INLINE void group_det(const int NH, const float *q, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                         int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                         float *o, float *ms) {
    const int CP = NH == 4 ? 3 : 4; /* registers: NH CP + 1 <= 16 */
    float mx[4], s[4], inv[4];
    scores_det(NH, CP, q, d_k, k, ldk, mi, cells, nc, scale, p, mx, v, ldv, d_v);
    softmax_det(NH, p, nc, mx, s);
    for (int h = 0; h < NH; h++) {
        inv[h] = s[h] > 0.0f ? 1.0f / s[h] : 0.0f;
        if (ms) ms[2 * h] = mx[h], ms[2 * h + 1] = s[h];
    }
    if (NH < 4)
        for (int64_t j0 = 0; j0 < d_v; j0 += 32) weighted_v_det(NH, 4, 1, p, nc, v, ldv, cells, d_v, j0, inv, o);
    else { /* 4 heads x 24 dims a pass (12 accumulators), then 16 or 8 */
        int64_t j0 = 0;
        for (; j0 + 24 <= d_v; j0 += 24) weighted_v_det(4, 3, 0, p, nc, v, ldv, cells, d_v, j0, inv, o);
        if (d_v - j0 == 16) weighted_v_det(4, 2, 0, p, nc, v, ldv, cells, d_v, j0, inv, o);
        else if (d_v - j0 == 8) weighted_v_det(4, 1, 0, p, nc, v, ldv, cells, d_v, j0, inv, o);
    }
}

int lp_attn_group_det256(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                         int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                         float *o, float *ms) {
    if (d_k % 8 || d_v % 32) return 0;
    for (int64_t h0 = 0; h0 < hpt; h0 += 4) { /* heads in fours: p, o and ms from head h0 */
        const int nh = (int)(hpt - h0 < 4 ? hpt - h0 : 4);
        const float *q = q0 + h0 * d_k;
        float *ph = p + h0 * nc, *oh = o + h0 * d_v, *mh = ms ? ms + 2 * h0 : NULL;
        switch (nh) {
        case 4: group_det(4, q, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, ph, oh, mh); break;
        case 3: group_det(3, q, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, ph, oh, mh); break;
        case 2: group_det(2, q, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, ph, oh, mh); break;
        default: group_det(1, q, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, ph, oh, mh); break;
        }
    }
    return 1;
}
#endif
