/* Attention of many query rows (a prompt's ubatch, a server step's prompt chunk) over an f16 KV
 * cache, in tiles: flash attention's online softmax, with the work laid out so that every K and
 * V value widened from f16 serves AT_G AT_Q query vectors.
 *
 * A tile is up to AT_Q query vectors (row, head): the heads h0..h0+nh of one KV head's group
 * for tr = AT_Q / nh rows.  A task is up to AT_G tiles of consecutive rows.  It walks the cells
 * from the first one any of its rows can see to the last, in blocks of AT_C that start at
 * multiples of AT_C (so that the sums' order does not depend on how rows are grouped into
 * tasks), widens a block's K and V rows once for its tiles, and skips a block for a tile whose
 * rows see nothing of it (a sliding window's early cells, another sequence's, a causal mask's
 * later rows); each tile, lane by lane:
 *
 *   S[c][i]  = (scale q_i) . k_c + mask[row(i)][c]        (QT [d_k][AT_Q] x the block's K rows)
 *   m_i'     = max(m_i, max_c S[c][i]);  P[c][i] = exp(S[c][i] - m_i')
 *   l_i      = l_i exp(m_i - m_i') + sum_c P[c][i]
 *   OT[j][i] = OT[j][i] exp(m_i - m_i') + sum_c v_c[j] P[c][i]
 *
 * and writes out[row(i)][head(i) d_v + j] = OT[j][i] / l_i (zeros for a row that sees nothing).
 * Both products are one micro-kernel, C[R][AT_Q] += A (broadcast) x B[k][AT_Q] (vectors): the
 * query vectors are the lanes, so the softmax's maxima and sums are taken lane by lane.  fp32
 * throughout; the same softmax as the few-row kernel (attn.c) up to the order of its sums. */
#include <omp.h>

#include "lp.h"

/* Query vectors of a tile (the lanes: two vectors of them at AVX-512, so that each broadcast
 * value feeds two FMAs and each widened K and V value 32 query vectors), cells of a KV block,
 * and tiles of a task (at most: fewer where the threads would get under 4 tasks each).
 * benchmarks/attn_tiles.py, Gemma 3's heads (4 x 256, one KV head), a causal 512-row prompt, 2
 * threads on a 2-core Intel Xeon (KVM, family 6 model 167): at the AVX-512 level 16 x 16 2.92
 * ms, 32 x 16 2.47, 32 x 32 2.35; at the AVX2 level 16 x 32 3.89 ms, 16 x 16 3.65 (tiles of
 * one).  On a 2-core AMD EPYC (Zen 3, family 25 model 1; AVX2), the same shape at one thread,
 * thread CPU time, medians of 30 alternating calls: 4 tiles a task (each widened K and V value
 * serving 64 query vectors, not 16), 6 rows a micro-kernel call and 8 x 8 transposes 7.18 ms
 * against 8.88 (1.23x), the same bits; 2 tiles 1.05x slower than 4, 8 no faster; 32-cell
 * blocks 0.97x.  The products then run at ~88% of the FMA peak (fma_peak.py: 51.3 G a second),
 * the rest ~1.2 ms (exp 0.45, widening 0.35).  AVX-512 keeps tiles of one (not measured there). */
#if defined(LP_AVX512)
#define AT_Q 32
#define AT_C 32
#define AT_G 1
#else
#define AT_Q 16
#define AT_C 16
#define AT_G 4
#endif

#if defined(LP_AVX512)
#define VF_MAX(a, b) _mm512_max_ps(a, b)
#define VF_SUB(a, b) _mm512_sub_ps(a, b)
#elif defined(LP_AVX2)
#define VF_MAX(a, b) _mm256_max_ps(a, b)
#define VF_SUB(a, b) _mm256_sub_ps(a, b)
#elif defined(LP_NEON)
#define VF_MAX(a, b) vmaxq_f32(a, b)
#define VF_SUB(a, b) vsubq_f32(a, b)
#else
#define VF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define VF_SUB(a, b) ((a) - (b))
#endif

/* Rows of C a micro-kernel call keeps in registers: enough independent FMA chains to cover the
 * FMA latency (AVX-512: 8 zmm; AVX2: 12 of its 16 ymm, 1.02x over 8 on Zen 3; NEON: 16 registers
 * of 4 rows). */
#if defined(LP_AVX512)
#define AT_R 8
#elif defined(LP_AVX2)
#define AT_R 6
#else
#define AT_R 4
#endif

/* C[i][0..AT_Q) = C[i][0..AT_Q) (times sc[0..AT_Q) lane by lane, where sc is given) + sum_k
 * A[i ars + k aks] B[k][0..AT_Q) for the R (AT_R or 4) rows i of C (AT_Q floats apart). */
LP_INLINE void mk(const int R, int64_t K, const float *A, int64_t ars, int64_t aks, const float *B, const float *sc,
                  float *C) {
    vf acc[AT_R][AT_Q / VW];
    for (int i = 0; i < R; i++)
        for (int v = 0; v < AT_Q / VW; v++)
            acc[i][v] = sc ? VF_MUL(VF_LOAD(C + AT_Q * i + VW * v), VF_LOAD(sc + VW * v)) : VF_LOAD(C + AT_Q * i + VW * v);
    for (int64_t k = 0; k < K; k++) {
        vf b[AT_Q / VW];
        for (int v = 0; v < AT_Q / VW; v++) b[v] = VF_LOAD(B + AT_Q * k + VW * v);
        for (int i = 0; i < R; i++) {
            const vf a = VF_SET1(A[i * ars + k * aks]);
            for (int v = 0; v < AT_Q / VW; v++) acc[i][v] = VF_FMA(a, b[v], acc[i][v]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int v = 0; v < AT_Q / VW; v++) VF_STORE(C + AT_Q * i + VW * v, acc[i][v]);
}

/* C [n][AT_Q] = C (sc) + A B as mk, n a multiple of 4: AT_R rows a call, then 4 (AT_R 8: at
 * most one call of 4; AT_R 6: (n / 4) % 3 of them, so that the 6s end on a multiple of 4). */
static void mk_rows(int64_t n, int64_t K, const float *A, int64_t ars, int64_t aks, const float *B, const float *sc,
                    float *C) {
    const int64_t n4 = AT_R == 6 ? n - 4 * (n / 4 % 3) : n / AT_R * AT_R;
    int64_t i = 0;
    for (; i < n4; i += AT_R) mk(AT_R, K, A + i * ars, ars, aks, B, sc, C + i * AT_Q);
    for (; i < n; i += 4) mk(4, K, A + i * ars, ars, aks, B, sc, C + i * AT_Q);
}

/* Of the nc cells at m (rows t < nrow, ld apart): does any row see one (*seen), and is one
 * hidden from a row (*hidden: the block needs its mask)? */
static void block_sight(const float *m, int64_t ld, int64_t nrow, int64_t nc, int *seen, int *hidden) {
    int64_t n_vis = 0;
    for (int64_t t = 0; t < nrow; t++) {
        const float *mr = m + t * ld;
        int64_t c = 0;
#if defined(LP_AVX512)
        for (; c < nc; c += 16) {
            const __mmask16 in = (__mmask16)(nc - c >= 16 ? 0xffff : (1u << (nc - c)) - 1);
            n_vis += __builtin_popcount(_mm512_mask_cmp_ps_mask(in, _mm512_maskz_loadu_ps(in, mr + c), _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ));
        }
#endif
        for (; c < nc; c++) n_vis += mr[c] != -INFINITY;
    }
    *seen = n_vis > 0, *hidden = n_vis < nrow * nc;
}

/* p[0..n) = exp(p[0..n)) (-inf: 0); n a multiple of 8. */
static void exp_inplace(float *p, int64_t n) {
#if defined(LP_AVX512)
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) _mm512_storeu_ps(p + c, lp_exp16(_mm512_loadu_ps(p + c)));
    for (; c < n; c += 8) _mm256_storeu_ps(p + c, lp_exp8(_mm256_loadu_ps(p + c)));
#elif defined(LP_AVX2)
    for (int64_t c = 0; c < n; c += 8) _mm256_storeu_ps(p + c, lp_exp8(_mm256_loadu_ps(p + c)));
#else
    for (int64_t c = 0; c < n; c++) p[c] = expf(p[c]);
#endif
}

/* f16 rows src + c ld (c < nc) as float rows dst [AT_C][d]; rows nc.. zero. */
static void widen_block(const uint16_t *src, int64_t ld, int64_t nc, int64_t d, float *dst) {
    for (int64_t c = 0; c < AT_C; c++) {
        float *o = dst + c * d;
        if (c >= nc) {
            memset(o, 0, (size_t)d * sizeof(float));
            continue;
        }
        const uint16_t *s = src + c * ld;
        int64_t j = 0;
#if VW > 1
        for (; j + VW <= d; j += VW) VF_STORE(o + j, VF_LOADH(s + j));
#endif
        for (; j < d; j++) o[j] = lp_f16_to_f32(s[j]);
    }
}

/* S[c][i] += the mask's value for vector i's row (its row i / nh of m, rows ld apart) and cell
 * c, for the nq vectors and nc cells there are; -inf elsewhere (past the last cell, padding
 * vectors).  On x86 a gather of AT_Q mask values a cell. */
static void add_mask(float *S, const float *m, int64_t ld, int64_t nh, int64_t nq, int64_t nc) {
#if defined(LP_AVX512) || defined(LP_AVX2)
    int32_t at[AT_Q]; /* vector i's offset in m */
    for (int64_t i = 0; i < AT_Q; i++) at[i] = i < nq ? (int32_t)(i / nh * ld) : 0;
    for (int64_t c = 0; c < AT_C; c++)
        for (int v = 0; v < AT_Q / VW; v++) {
            float *s = S + c * AT_Q + VW * v;
#if defined(LP_AVX512)
            const __mmask16 k = c < nc ? (__mmask16)(nq - VW * v >= 16 ? 0xffff : nq > VW * v ? (1u << (nq - VW * v)) - 1 : 0) : 0;
            const __m512 g = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, _mm512_loadu_si512(at + VW * v), m + c, 4);
            _mm512_storeu_ps(s, _mm512_mask_add_ps(_mm512_set1_ps(-INFINITY), k, _mm512_loadu_ps(s), g));
#else
            const __m256i lane = _mm256_add_epi32(_mm256_set1_epi32(VW * v), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            const __m256 k = _mm256_castsi256_ps(c < nc ? _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nq), lane) : _mm256_setzero_si256());
            const __m256 g = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), m + c, _mm256_loadu_si256((const __m256i *)(at + VW * v)), k, 4);
            _mm256_storeu_ps(s, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_add_ps(_mm256_loadu_ps(s), g), k));
#endif
        }
#else
    for (int64_t c = 0; c < AT_C; c++)
        for (int64_t i = 0; i < AT_Q; i++)
            S[c * AT_Q + i] = c < nc && i < nq ? S[c * AT_Q + i] + m[i / nh * ld + c] : -INFINITY;
#endif
}

#include "attn_tiles_tr.inc" /* transpose_in, transpose_out */

typedef struct {
    int64_t n_head, n_head_kv, d_k, d_v, ldq, ldk, ldv, n_kv, ldo;
    float scale;
} at_dims;

/* Floats of one thread's workspace: the widened K and V block, the scores, two lane vectors,
 * and each of AT_G tiles' QT, OT, maxima and sums. */
static int64_t ws_floats(int64_t d_k, int64_t d_v) {
    return AT_C * (d_k + d_v) + AT_C * AT_Q + 2 * AT_Q + AT_G * (AT_Q * (d_k + d_v) + 2 * AT_Q);
}

/* The cells [*lo, *hi) rows row0..row0+nrow-1 of the mask (rows n_kv apart) see; *lo >= *hi: none. */
static void seen_range(const float *mask, int64_t n_kv, int64_t row0, int64_t nrow, int64_t *lo, int64_t *hi) {
    *lo = n_kv, *hi = 0;
    for (int64_t t = 0; t < nrow; t++) {
        const float *mr = mask + (row0 + t) * n_kv;
        int64_t a = 0, b = n_kv;
        while (a < n_kv && mr[a] == -INFINITY) a++;
        while (b > a && mr[b - 1] == -INFINITY) b--;
        if (a < b) *lo = a < *lo ? a : *lo, *hi = b > *hi ? b : *hi;
    }
}

/* A task: ng tiles of tr rows each (the last one nrow - (ng - 1) tr rows) from row0, heads
 * h0..h0+nh-1 (tr nh <= AT_Q; one KV head).  Each block of AT_C cells (starting at a multiple of
 * AT_C, so that the blocks and the sums' order are the same whatever the tasks) is widened once
 * for all the tiles that see any of it. */
static void tile_task(const at_dims *D, const float *q, const uint16_t *k, const uint16_t *v, const float *mask,
                      float *out, int64_t row0, int64_t nrow, int64_t tr, int64_t h0, int64_t nh, float *ws) {
    const int64_t d_k = D->d_k, d_v = D->d_v, n_kv = D->n_kv, hk = h0 / (D->n_head / D->n_head_kv);
    const int64_t ng = (nrow + tr - 1) / tr, sub = AT_Q * (d_k + d_v) + 2 * AT_Q; /* floats of a tile's part */
    float *Kb = ws, *Vb = Kb + AT_C * d_k, *S = Vb + AT_C * d_v, *mn = S + AT_C * AT_Q, *corr = mn + AT_Q;
    float *const tiles = corr + AT_Q;
    int64_t glo = n_kv, ghi = 0, lo[AT_G], hi[AT_G];
    for (int64_t g = 0; g < ng; g++) {
        const int64_t r0 = row0 + g * tr, nr = nrow - g * tr < tr ? nrow - g * tr : tr, nq = nr * nh;
        float *QT = tiles + g * sub, *OT = QT + d_k * AT_Q, *m = OT + d_v * AT_Q, *l = m + AT_Q;
        const float *qv[AT_Q]; /* vector i's query (NULL: a padding vector) */
        for (int64_t i = 0; i < AT_Q; i++) {
            qv[i] = i < nq ? q + (r0 + i / nh) * D->ldq + (h0 + i % nh) * d_k : NULL;
            m[i] = -INFINITY, l[i] = 0.0f;
        }
        transpose_in(qv, d_k, D->scale, QT);
        memset(OT, 0, (size_t)(d_v * AT_Q) * sizeof(float));
        seen_range(mask, n_kv, r0, nr, lo + g, hi + g);
        if (lo[g] < hi[g]) glo = lo[g] < glo ? lo[g] : glo, ghi = hi[g] > ghi ? hi[g] : ghi;
    }
    for (int64_t c0 = glo - glo % AT_C; c0 < ghi; c0 += AT_C) {
        const int64_t nc = ghi - c0 < AT_C ? ghi - c0 : AT_C;
        int seen[AT_G], hidden[AT_G], any = 0;
        for (int64_t g = 0; g < ng; g++) {
            const int64_t r0 = row0 + g * tr, nr = nrow - g * tr < tr ? nrow - g * tr : tr;
            seen[g] = 0, hidden[g] = 1;
            if (c0 < hi[g] && c0 + AT_C > lo[g]) block_sight(mask + r0 * n_kv + c0, n_kv, nr, nc, seen + g, hidden + g);
            any |= seen[g];
        }
        if (!any) continue;
        widen_block(k + c0 * D->ldk + hk * d_k, D->ldk, nc, d_k, Kb);
        widen_block(v + c0 * D->ldv + hk * d_v, D->ldv, nc, d_v, Vb);
        for (int64_t g = 0; g < ng; g++) {
            if (!seen[g]) continue;
            const int64_t r0 = row0 + g * tr, nq = (nrow - g * tr < tr ? nrow - g * tr : tr) * nh;
            float *QT = tiles + g * sub, *OT = QT + d_k * AT_Q, *m = OT + d_v * AT_Q, *l = m + AT_Q;
            const int masked = hidden[g] || nc < AT_C || nq < AT_Q; /* some score needs the mask or -inf */
            memset(S, 0, sizeof(float) * AT_C * AT_Q);
            mk_rows(AT_C, d_k, Kb, d_k, 1, QT, NULL, S);
            if (masked) /* the mask, and -inf past the last cell and for the padding vectors */
                add_mask(S, mask + r0 * n_kv + c0, n_kv, nh, nq, nc);
            /* the online softmax, lane by lane: m the running maxima, corr their change's factor */
            for (int v = 0; v < AT_Q / VW; v++) {
                vf mx = VF_LOAD(m + VW * v);
                for (int64_t c = 0; c < AT_C; c++) mx = VF_MAX(mx, VF_LOAD(S + c * AT_Q + VW * v));
                VF_STORE(mn + VW * v, mx);
            }
            for (int64_t i = 0; i < AT_Q; i++) { /* -inf: nothing seen yet, nothing to rescale */
                corr[i] = m[i] == -INFINITY ? -INFINITY : m[i] - mn[i];
                m[i] = mn[i];
                mn[i] = mn[i] == -INFINITY ? 0.0f : mn[i];
            }
            for (int64_t c = 0; c < AT_C; c++)
                for (int v = 0; v < AT_Q / VW; v++)
                    VF_STORE(S + c * AT_Q + VW * v, VF_SUB(VF_LOAD(S + c * AT_Q + VW * v), VF_LOAD(mn + VW * v)));
            exp_inplace(S, AT_C * AT_Q);
            exp_inplace(corr, AT_Q);
            for (int v = 0; v < AT_Q / VW; v++) {
                vf sum = VF_MUL(VF_LOAD(l + VW * v), VF_LOAD(corr + VW * v));
                for (int64_t c = 0; c < AT_C; c++) sum = VF_ADD(sum, VF_LOAD(S + c * AT_Q + VW * v));
                VF_STORE(l + VW * v, sum);
            }
            mk_rows(d_v, AT_C, Vb, 1, d_v, S, corr, OT); /* OT rescaled by corr as it is loaded */
        }
    }
    for (int64_t g = 0; g < ng; g++) {
        const int64_t r0 = row0 + g * tr, nq = (nrow - g * tr < tr ? nrow - g * tr : tr) * nh;
        const float *OT = tiles + g * sub + d_k * AT_Q, *l = OT + d_v * AT_Q + AT_Q;
        float *ov[AT_Q], inv[AT_Q]; /* vector i's output row (NULL: a padding vector), 1 / l */
        for (int64_t i = 0; i < AT_Q; i++) {
            ov[i] = i < nq ? out + (r0 + i / nh) * D->ldo + (h0 + i % nh) * d_v : NULL;
            inv[i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        }
        transpose_out(OT, d_v, inv, ov);
    }
}

/* out [n, ldo] (row i's head h at out + i ldo + h d_v) = attention of q [n, ldq] (heads of d_k
 * contiguous) over the cells of k, v (f16 [n_kv, n_head_kv d_k] and [n_kv, n_head_kv d_v], one
 * stream) through the additive mask [n, n_kv] (0 or -inf), query head h reading KV head
 * h / (n_head / n_head_kv).  Returns 0; -1 without scratch memory; -2 when d_k or d_v is not a
 * multiple of 4 (the caller takes another path). */
int lp_attn_tiles_f16(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k,
                      int64_t d_v, const uint16_t *k, const uint16_t *v, int64_t n_kv, const float *mask, float scale,
                      float *out, int64_t ldo) {
    if (d_k % 4 || d_v % 4 || n_head % n_head_kv) return -2;
    const at_dims D = {n_head, n_head_kv, d_k, d_v, ldq, n_head_kv * d_k, n_head_kv * d_v, n_kv, ldo, scale};
    const int64_t r = n_head / n_head_kv, nh = r < AT_Q ? r : AT_Q, hc = (r + nh - 1) / nh; /* head chunks a group */
    const int64_t tr = AT_Q / nh, n_rt = (n + tr - 1) / tr;
    /* tiles a task: up to AT_G while every thread still gets 4 tasks or more */
    int64_t G = n_rt * n_head_kv * hc / (4 * (int64_t)omp_get_max_threads());
    G = G < 1 ? 1 : G > AT_G ? AT_G : G;
    const int64_t n_gt = (n_rt + G - 1) / G, n_task = n_gt * n_head_kv * hc;
    int failed = 0;
#pragma omp parallel
    {
        float *ws = (float *)malloc((size_t)ws_floats(d_k, d_v) * sizeof(float));
        if (!ws) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = n_task - 1; t >= 0; t--) { /* the last rows first: under a causal mask they see the most */
            if (!ws) continue;
            const int64_t rt = t / (n_head_kv * hc), g = t % (n_head_kv * hc), hk = g / hc, h0 = hk * r + g % hc * nh;
            const int64_t row0 = rt * G * tr, nrow = n - row0 < G * tr ? n - row0 : G * tr;
            const int64_t nhh = hk * r + r - h0 < nh ? hk * r + r - h0 : nh;
            tile_task(&D, q, k, v, mask, out, row0, nrow, tr, h0, nhh, ws);
        }
        free(ws);
    }
    return failed ? -1 : 0;
}
