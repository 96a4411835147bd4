/* --deterministic's attention of one query row's group of hpt heads (sharing a KV head) over
 * its visible cells, f16 cache, 512-bit vectors.  A row's attention under the flag is this
 * function of that row alone (attn.c lp_attn_det_for: its own cells, chunks and merge), so any
 * order inside it is the row's own whatever the batch; this one is chosen for speed:
 *   scores: up to 4 heads x 4 cells a pass, each K row's 16 dims converted once for the 4
 *     heads (the one-row kernel attn_x86.c converts them per head, 8 at a time), the 16
 *     accumulators reduced by a transpose-add to 4 x 4 scores;
 *   softmax: 16 exponentials at a time (lp_exp16);
 *   weighted V: up to 4 heads x 64 dims in registers a pass over the cells.
 * The same scores, softmax and sums as attn.c's attn_group, in another order. */
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

/* kr[0..4): the K rows of cells[c0 .. c0 + 4) (past nc: the last one again), those DET_PF_CELLS on asked for;
 * returns how many are real (<= 4). */
LP_INLINE int k_rows4(const uint16_t *k, int64_t ldk, int64_t d_k, const int64_t *cells, int64_t c0, int64_t nc,
                      const uint16_t **kr) {
    const int nv = (int)(nc - c0 < 4 ? nc - c0 : 4);
    for (int i = 0; i < 4; i++) kr[i] = k + cells[c0 + (i < nv ? i : nv - 1)] * ldk;
    for (int i = 0; i < 4 && c0 + DET_PF_CELLS + i < nc; i++)
        for (int64_t b = 0; b < d_k * 2; b += 64) _mm_prefetch((const char *)(k + cells[c0 + DET_PF_CELLS + i] * ldk) + b, _MM_HINT_T0);
    return nv;
}

/* Scores of NH heads (q rows q, d_k apart) against cells[0..nc) into p[h ldp + c]; mx[h]: their max.  A cell's
 * score is its own FMA chain over the dims (16 lanes, j ascending) and hsum4's tree, whatever its slot or group. */
LP_INLINE void scores4(const int NH, const float *q, int64_t d_k, const uint16_t *k, int64_t ldk, const float *mi,
                       const int64_t *cells, int64_t nc, float scale, float *p, int64_t ldp, float *mx) {
    __m128 m4[4];
    for (int h = 0; h < NH; h++) m4[h] = _mm_set1_ps(-INFINITY);
    const __m128 sc = _mm_set1_ps(scale);
    for (int64_t c0 = 0; c0 < nc; c0 += 4) {
        const uint16_t *kr[4];
        const int nv = k_rows4(k, ldk, d_k, cells, c0, nc, kr);
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
            _mm_mask_storeu_ps(p + h * ldp + c0, valid, s);
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
    scores4(NH, q, d_k, k, ldk, mi, cells, nc, scale, p, nc, mx);
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

/* ---- two query rows at once (lp_attn_pair_det): every (row, head, cell) score, softmax and (row, head, dim) V sum
 * is the one group4 computes for that row alone; only the loads and f16 conversions of the cells both rows see are
 * shared.  Groups of up to 3 heads (SmolLM2's 3: 2 x 3 x 4 score and V accumulators); 4 heads a group (Gemma 3)
 * as 2 cells a pass and 32 V dims a pass measured 0.80-0.86x of two rows alone (-t 1, Xeon model 207), so those
 * rows run alone. ---- */

/* The largest of p[0..n) (-inf where n is 0); the same value as scores4's running max (max is exact). */
static float rowmax16(const float *p, int64_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t c = 0; c < n; c += 16) {
        const __mmask16 k = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
        m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, p + c));
    }
    return _mm512_reduce_max_ps(m);
}

/* Scores of rows a and b (NH <= 3 heads each, q rows d_k apart) against the cells both see, cells[0..nc): pa[h lda +
 * c], pb[h ldb + c]; scores4's chains and tree, 4 cells a pass, each K row's 16 dims converted once for 2 x NH heads. */
LP_INLINE void scores_pair4(const int NH, const float *qa, const float *qb, int64_t d_k, const uint16_t *k, int64_t ldk,
                            const float *mia, const float *mib, const int64_t *cells, int64_t nc, float scale, float *pa,
                            int64_t lda, float *pb, int64_t ldb) {
    const __m128 sc = _mm_set1_ps(scale);
    for (int64_t c0 = 0; c0 < nc; c0 += 4) {
        const uint16_t *kr[4];
        const int nv = k_rows4(k, ldk, d_k, cells, c0, nc, kr);
        __m512 xa[3][4], xb[3][4];
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < 4; i++) xa[h][i] = _mm512_setzero_ps(), xb[h][i] = _mm512_setzero_ps();
        for (int64_t j = 0; j < d_k; j += 16) {
            __m512 kv[4];
            for (int i = 0; i < 4; i++) kv[i] = ldh16(kr[i] + j);
            for (int h = 0; h < NH; h++) {
                const __m512 qva = _mm512_loadu_ps(qa + h * d_k + j), qvb = _mm512_loadu_ps(qb + h * d_k + j);
                for (int i = 0; i < 4; i++) xa[h][i] = _mm512_fmadd_ps(qva, kv[i], xa[h][i]);
                for (int i = 0; i < 4; i++) xb[h][i] = _mm512_fmadd_ps(qvb, kv[i], xb[h][i]);
            }
        }
        const __mmask8 valid = (__mmask8)((1u << nv) - 1);
        const int64_t e1 = cells[c0 + (nv > 1)], e2 = cells[c0 + (nv > 2 ? 2 : 0)], e3 = cells[c0 + (nv > 3 ? 3 : 0)];
        const __m128 mka = _mm_setr_ps(mia[cells[c0]], nv > 1 ? mia[e1] : 0.0f, nv > 2 ? mia[e2] : 0.0f, nv > 3 ? mia[e3] : 0.0f);
        const __m128 mkb = _mm_setr_ps(mib[cells[c0]], nv > 1 ? mib[e1] : 0.0f, nv > 2 ? mib[e2] : 0.0f, nv > 3 ? mib[e3] : 0.0f);
        for (int h = 0; h < NH; h++) {
            _mm_mask_storeu_ps(pa + h * lda + c0, valid, _mm_fmadd_ps(hsum4(xa[h][0], xa[h][1], xa[h][2], xa[h][3]), sc, mka));
            _mm_mask_storeu_ps(pb + h * ldb + c0, valid, _mm_fmadd_ps(hsum4(xb[h][0], xb[h][1], xb[h][2], xb[h][3]), sc, mkb));
        }
    }
}

/* acc[h][j] += p[h ld + c - c_p] v_c[j0 + 16 j ..] over cells[c] for c in [c_begin, c_end): weighted_v4's chain. */
LP_INLINE void vsum_one(const int NH, const int JW, __m512 acc[4][4], const float *p, int64_t ld, int64_t c_p,
                        const int64_t *cells, int64_t c_begin, int64_t c_end, const uint16_t *v, int64_t ldv, int64_t j0) {
    for (int64_t c = c_begin; c < c_end; c++) {
        const uint16_t *vr = v + cells[c] * ldv + j0;
        if (c + DET_PF_CELLS < c_end) _mm_prefetch((const char *)(v + cells[c + DET_PF_CELLS] * ldv + j0), _MM_HINT_T0);
        __m512 vv[4];
        for (int j = 0; j < JW; j++) vv[j] = ldh16(vr + 16 * j);
        for (int h = 0; h < NH; h++) {
            const __m512 w = _mm512_set1_ps(p[h * ld + c - c_p]);
            for (int j = 0; j < JW; j++) acc[h][j] = _mm512_fmadd_ps(w, vv[j], acc[h][j]);
        }
    }
}

/* A pair's rows: a row's visible cells (all of them) and its chunk [c0, c1) of them; its scores p (stride nc). */
typedef struct {
    const lp_attn_det_row *r;
    float *p;
    int64_t nc;
} pair_row;

/* Rows a and b, NH heads: their V sums over dims j0 .. j0 + 16 JW, each row's cells in its own order: a's or b's
 * cells before the shared [lo, hi) alone, [lo, hi) together (each V row converted once), then each one's tail. */
LP_INLINE void vsum_pair(const int NH, const int JW, const pair_row *a, const pair_row *b, int64_t lo, int64_t hi,
                         const uint16_t *v, int64_t ldv, int64_t d_v, int64_t j0, float *oa, float *ob) {
    __m512 xa[4][4], xb[4][4];
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < JW; j++) xa[h][j] = _mm512_setzero_ps(), xb[h][j] = _mm512_setzero_ps();
    const int64_t a0 = a->r->c0, b0 = b->r->c0;
    vsum_one(NH, JW, xa, a->p, a->nc, a0, a->r->cells, a0, lo, v, ldv, j0);
    vsum_one(NH, JW, xb, b->p, b->nc, b0, b->r->cells, b0, lo, v, ldv, j0);
    const int64_t *cells = a->r->cells;
    for (int64_t c = lo; c < hi; c++) {
        const uint16_t *vr = v + cells[c] * ldv + j0;
        if (c + DET_PF_CELLS < hi) _mm_prefetch((const char *)(v + cells[c + DET_PF_CELLS] * ldv + j0), _MM_HINT_T0);
        __m512 vv[4];
        for (int j = 0; j < JW; j++) vv[j] = ldh16(vr + 16 * j);
        for (int h = 0; h < NH; h++) {
            const __m512 wa = _mm512_set1_ps(a->p[h * a->nc + c - a0]), wb = _mm512_set1_ps(b->p[h * b->nc + c - b0]);
            for (int j = 0; j < JW; j++) xa[h][j] = _mm512_fmadd_ps(wa, vv[j], xa[h][j]);
            for (int j = 0; j < JW; j++) xb[h][j] = _mm512_fmadd_ps(wb, vv[j], xb[h][j]);
        }
    }
    vsum_one(NH, JW, xa, a->p, a->nc, a0, a->r->cells, hi, a->r->c1, v, ldv, j0);
    vsum_one(NH, JW, xb, b->p, b->nc, b0, b->r->cells, hi, b->r->c1, v, ldv, j0);
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < JW; j++)
            _mm512_storeu_ps(oa + h * d_v + j0 + 16 * j, xa[h][j]), _mm512_storeu_ps(ob + h * d_v + j0 + 16 * j, xb[h][j]);
}

/* One row's scores over its chunk's cells [c_begin, c_end) (alone) into its p. */
LP_INLINE void scores_alone(const int NH, const pair_row *a, const float *q, int64_t d_k, const uint16_t *k, int64_t ldk,
                            int64_t c_begin, int64_t c_end, float scale) {
    float mx[4];
    if (c_end > c_begin)
        scores4(NH, q, d_k, k, ldk, a->r->mi, a->r->cells + c_begin, c_end - c_begin, scale, a->p + (c_begin - a->r->c0), a->nc, mx);
}

/* group4 of rows a and b (heads h0 .. h0 + NH of their groups; pa / pb: their scores from head h0). */
LP_INLINE void pair4(const int NH, const lp_attn_det_row *ra, const lp_attn_det_row *rb, int64_t h0, int64_t d_k, int64_t d_v,
                     const uint16_t *k, const uint16_t *v, int64_t ldk, int64_t ldv, int64_t lo, int64_t hi, float scale,
                     float *pa, float *pb) {
    const pair_row a = {ra, pa, ra->c1 - ra->c0}, b = {rb, pb, rb->c1 - rb->c0};
    const float *qa = ra->q + h0 * d_k, *qb = rb->q + h0 * d_k;
    scores_alone(NH, &a, qa, d_k, k, ldk, ra->c0, lo, scale);
    scores_alone(NH, &b, qb, d_k, k, ldk, rb->c0, lo, scale);
    float *sa = pa + (lo - ra->c0), *sb = pb + (lo - rb->c0);
    scores_pair4(NH, qa, qb, d_k, k, ldk, ra->mi, rb->mi, ra->cells + lo, hi - lo, scale, sa, a.nc, sb, b.nc);
    scores_alone(NH, &a, qa, d_k, k, ldk, hi, ra->c1, scale);
    scores_alone(NH, &b, qb, d_k, k, ldk, hi, rb->c1, scale);
    const pair_row *rows[2] = {&a, &b};
    for (int r = 0; r < 2; r++)
        for (int h = 0; h < NH; h++) {
            float *ph = rows[r]->p + h * rows[r]->nc, *ms = rows[r]->r->ms;
            const float m = rowmax16(ph, rows[r]->nc), s = softmax16(ph, rows[r]->nc, m);
            if (ms) ms[2 * (h0 + h)] = m, ms[2 * (h0 + h) + 1] = s;
        }
    float *oa = ra->o + h0 * d_v, *ob = rb->o + h0 * d_v;
    for (int64_t j0 = 0; j0 < d_v; j0 += 64) vsum_pair(NH, 4, &a, &b, lo, hi, v, ldv, d_v, j0, oa, ob);
}

int lp_attn_pair_det(const lp_attn_det_row *a, const lp_attn_det_row *b, int64_t hpt, int64_t d_k, int64_t d_v,
                     const uint16_t *k, const uint16_t *v, int64_t ldk, int64_t ldv, float scale, float *p) {
    if (d_k % 16 || d_v % 64 || hpt > 3) return 0;
    const int64_t lo = a->c0 > b->c0 ? a->c0 : b->c0, end = a->c1 < b->c1 ? a->c1 : b->c1;
    int64_t hi = end; /* the cells both see, at the same place in both lists: [lo, hi) */
    if (end > lo && memcmp(a->cells + lo, b->cells + lo, (size_t)(end - lo) * sizeof(int64_t)))
        for (hi = lo; a->cells[hi] == b->cells[hi];) hi++;
    if (hi - lo < LP_ATTN_PAIR_MIN || a->c1 == a->c0 || b->c1 == b->c0) { /* each alone */
        lp_attn_group_det(a->q, hpt, d_k, d_v, k, v, ldk, ldv, a->mi, a->cells + a->c0, a->c1 - a->c0, scale, p, a->o, a->ms);
        lp_attn_group_det(b->q, hpt, d_k, d_v, k, v, ldk, ldv, b->mi, b->cells + b->c0, b->c1 - b->c0, scale, p, b->o, b->ms);
        return 1;
    }
    float *pa = p, *pb = p + hpt * (a->c1 - a->c0);
    switch (hpt) {
    case 3: pair4(3, a, b, 0, d_k, d_v, k, v, ldk, ldv, lo, hi, scale, pa, pb); break;
    case 2: pair4(2, a, b, 0, d_k, d_v, k, v, ldk, ldv, lo, hi, scale, pa, pb); break;
    default: pair4(1, a, b, 0, d_k, d_v, k, v, ldk, ldv, lo, hi, scale, pa, pb); break;
    }
    return 1;
}
#elif defined(LP_AVX2) /* the AVX2 level: attn_det_avx2_x86.c */
int lp_attn_group_det(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                      int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                      float *o, float *ms) {
    return lp_attn_group_det256(q0, hpt, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, p, o, ms);
}
#endif
#if !defined(LP_AVX512)
int lp_attn_pair_det(const lp_attn_det_row *a, const lp_attn_det_row *b, int64_t hpt, int64_t d_k, int64_t d_v,
                     const uint16_t *k, const uint16_t *v, int64_t ldk, int64_t ldv, float scale, float *p) {
    (void)a, (void)b, (void)hpt, (void)d_k, (void)d_v, (void)k, (void)v, (void)ldk, (void)ldv, (void)scale, (void)p;
    return 0;
}
#endif
#if !defined(LP_AVX512) && !defined(LP_AVX2)
int lp_attn_group_det(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const uint16_t *k, const uint16_t *v,
                      int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                      float *o, float *ms) {
    (void)q0, (void)hpt, (void)d_k, (void)d_v, (void)k, (void)v, (void)ldk, (void)ldv, (void)mi, (void)cells, (void)nc;
    (void)scale, (void)p, (void)o, (void)ms;
    return 0;
}
#endif
