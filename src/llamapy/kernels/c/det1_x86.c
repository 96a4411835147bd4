/* Deterministic mode's one-row product (x86): one activation row against a weight matrix in
 * the order the lanes (lanes_x86.c lp_lanes_tile, lp_twin_tile) give every (row, output) of a
 * many-row product, so that under --deterministic a row's outputs are the same bits whatever
 * the row count (rows_det_x86.c: this file for one row, the lanes for more).  That order, per
 * output o, over the blocks b of 32 in order (g16 types: each 16-group gi of the block):
 *
 *   i   = the exact int32 sum of w[k] x[k] over the block (16-group), w the canonical integers
 *         (lp.h; lp_unpack_row16's), x the row's int16 (lp_prepare_x_row)
 *   acc = fmaf((float)i, d16[gi] * s[b], acc)            (d16 * s rounded once)
 *   acc = fmaf(xsum, m16[gi], acc)                       (types with a minimum; xsum: sum32[b],
 *                                                         g16: sum16[gi])
 *
 * Integer addition is associative, so any instruction order gives i; the float steps are one
 * scalar sequence per output.  Here LP_DET1_W outputs at once: each output's block dot as 8
 * int32 partials (vpdpwssd / vpmaddwd on ymm, at both x86 levels), the 8 outputs' partials
 * summed into one vector of 8 per-output sums (a transpose-add), then the float steps as
 * vector operations across the outputs (a vector FMA is fmaf per lane).  The 32-element types
 * decode in registers (blocks_x86.h block16, Q4_0's -8 made part of q as the canonical form
 * has it); so do Q4_K / Q5_K / Q6_K, a super-block (half of Q6_K's) at a time per output, its
 * sums and scales then transposed to a lane per output; any other type the lanes take would go
 * through lp_unpack_row16 / the canonical form (the lanes' own decoding) into scratch. */
#include "det1_x86.h"

#include "blocks_x86.h"
#include "lanes_x86.h"
#include "unpack_x86.h"

#define W LP_DET1_W

/* one weight row's room in scratch: its canonical form (d16, m16) and its int16 values */
static size_t d1_row_bytes(int64_t n_in) { return lp_wrow_bytes(n_in) + (size_t)n_in * 2 + 128; }
size_t lp_det1_scratch_bytes(int64_t n_in) { return W * d1_row_bytes(n_in) + 64; }

#if defined(LP_AVX2) || defined(LP_AVX512)

LP_INLINE __m256i d1_pair(__m256i a, __m256i b) { return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b)); }
LP_INLINE __m256i d1_quad(__m256i p, __m256i q) { return _mm256_add_epi32(_mm256_unpacklo_epi64(p, q), _mm256_unpackhi_epi64(p, q)); }
/* lane j: the sum of v[j]'s 8 lanes (exact) */
LP_INLINE __m256i d1_sum8x8(const __m256i v[8]) {
    const __m256i u0 = d1_quad(d1_pair(v[0], v[1]), d1_pair(v[2], v[3]));
    const __m256i u1 = d1_quad(d1_pair(v[4], v[5]), d1_pair(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

LP_INLINE __m256i d1_dot16(__m256i w, __m256i x) {
#if defined(LP_VNNI) || defined(LP_AVXVNNI)
    return lp_dpwssd256(_mm256_setzero_si256(), w, x);
#else
    return _mm256_madd_epi16(w, x);
#endif
}

/* Block bp of a 32-element type in canonical form (unpack_x86.c canon16's decoding). */
LP_INLINE void d1_canon(const int type, const uint8_t *bp, __m256i *wl, __m256i *wh, float *d, float *m) {
    block16(type, bp, wl, wh, d, m);
    if (type == LP_Q4_0) {
        *wl = _mm256_sub_epi16(*wl, _mm256_set1_epi16(8));
        *wh = _mm256_sub_epi16(*wh, _mm256_set1_epi16(8));
        *m = 0.0f;
    }
}

/* Prefetch lines of [pf, pf + 64 n): the part of them that block b of nb requests. */
LP_INLINE void d1_prefetch(const char *pf, int64_t n, int64_t b, int64_t nb) {
    const int64_t per = (n + nb - 1) / nb;
    for (int64_t i = b * per; i < (b + 1) * per && i < n; i++) LP_PREFETCH_W(pf + 64 * i);
}

/* W rows wj[j] of a 32-element type against the row: out[j]. */
LP_INLINE void det1_32(const int type, const uint8_t *const *wj, int64_t nb, const lp_xrows *xr, const char *pf,
                       int64_t pf_lines, float *out) {
    const int bb = bytes32(type), mins = type == LP_Q4_1 || type == LP_Q5_1;
    const int16_t *xq = xr->q;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        d1_prefetch(pf, pf_lines, b, nb);
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq + 32 * b));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 32 * b + 16));
        __m256i v[W];
        float d[W], m[W];
#pragma GCC unroll 8
        for (int j = 0; j < W; j++) {
            __m256i wl, wh;
            d1_canon(type, wj[j] + b * bb, &wl, &wh, &d[j], &m[j]);
            v[j] = lp_dot32x(wl, wh, x0, x1);
        }
        const __m256 dv = _mm256_setr_ps(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1_sum8x8(v)), _mm256_mul_ps(dv, _mm256_set1_ps(xr->s[b])), acc);
        if (mins)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(xr->sum32[b]), _mm256_setr_ps(m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]),
                                  acc);
    }
    _mm256_storeu_ps(out, acc);
}

/* W rows decoded to int16 (w16[j], d16 / m16 in wr[j]) against the row: out[j]. */
LP_INLINE void det1_16(const int g16, const int has_min, const int16_t *const *w16, const lp_wrow *const *wr, int64_t n_in,
                       const lp_xrows *xr, float *out) {
    const int16_t *xq = xr->q;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_in / 32; b++) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq + 32 * b));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 32 * b + 16));
        for (int h = 0; h < (g16 ? 2 : 1); h++) {
            const int64_t gi = g16 ? 2 * b + h : 2 * b;
            __m256i v[W];
#pragma GCC unroll 8
            for (int j = 0; j < W; j++) {
                const __m256i *p = (const __m256i *)(w16[j] + 32 * b);
                v[j] = g16 ? d1_dot16(_mm256_loadu_si256(p + h), h ? x1 : x0)
                           : lp_dot32x(_mm256_loadu_si256(p), _mm256_loadu_si256(p + 1), x0, x1);
            }
#define COL(f) _mm256_setr_ps(wr[0]->f[gi], wr[1]->f[gi], wr[2]->f[gi], wr[3]->f[gi], wr[4]->f[gi], wr[5]->f[gi], wr[6]->f[gi], wr[7]->f[gi])
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1_sum8x8(v)), _mm256_mul_ps(COL(d16), _mm256_set1_ps(xr->s[b])), acc);
            if (has_min) acc = _mm256_fmadd_ps(_mm256_set1_ps(g16 ? xr->sum16[gi] : xr->sum32[b]), COL(m16), acc);
#undef COL
        }
    }
    _mm256_storeu_ps(out, acc);
}

/* ---- the K-quants in registers: per output a super-block's sums (lane = its sub-block or
 * 16-group) and scales (d sc, -(dmin m): unpack_x86.c's values), then both transposed so that a
 * lane is an output again, and the float steps in sub-block order ---- */
LP_INLINE void d1_tr8(__m256 r[8]) { /* r[t] lane o <- r[o] lane t */
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}


/* W rows wj[j] of Q4_K / Q5_K against the row: out[j]. */
LP_INLINE void det1_k45(const int type, const uint8_t *const *wj, int64_t nsb, const lp_xrows *xr, float *out) {
    const int bb = type == LP_Q4_K ? 144 : 176;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const int16_t *xq = xr->q + 256 * sb;
        __m256 g[W], dv[W], mv[W];
        for (int o = 0; o < W; o++) {
            const uint8_t *b = wj[o] + sb * bb, *qs = b + (type == LP_Q4_K ? 16 : 48);
            const __m128i sm = lp_k45_sc(b + 4);
            const __m128 dd = f16x2_ps(b);
            dv[o] = _mm256_mul_ps(_mm256_broadcastss_ps(dd), lp_u8x8(sm));
            mv[o] = _mm256_xor_ps(_mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)), lp_u8x8(_mm_unpackhi_epi64(sm, sm))),
                                  _mm256_set1_ps(-0.0f));
            __m256i hb = type == LP_Q5_K ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
            __m256i v[8];
            for (int j = 0; j < 4; j++) {
                __m256i wa, wb;
                k45_pair(type, qs + 32 * j, &hb, &wa, &wb);
                const __m256i *x = (const __m256i *)(xq + 64 * j);
                v[2 * j] = lp_dot32x(lo16(wa), hi16(wa), _mm256_loadu_si256(x), _mm256_loadu_si256(x + 1));
                v[2 * j + 1] = lp_dot32x(lo16(wb), hi16(wb), _mm256_loadu_si256(x + 2), _mm256_loadu_si256(x + 3));
            }
            g[o] = _mm256_cvtepi32_ps(d1_sum8x8(v));
        }
        d1_tr8(g), d1_tr8(dv), d1_tr8(mv);
        for (int t = 0; t < 8; t++) {
            const int64_t b = 8 * sb + t;
            acc = _mm256_fmadd_ps(g[t], _mm256_mul_ps(dv[t], _mm256_set1_ps(xr->s[b])), acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(xr->sum32[b]), mv[t], acc);
        }
    }
    _mm256_storeu_ps(out, acc);
}

/* W rows wj[j] of Q6_K against the row: out[j] (a scale per 16-group, no minimum). */
LP_INLINE void det1_q6k(const uint8_t *const *wj, int64_t nsb, const lp_xrows *xr, float *out) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        for (int n = 0; n < 2; n++) { /* the super-block's halves: 16-groups 8 n .. 8 n + 7 */
            const int16_t *xq = xr->q + 256 * sb + 128 * n;
            __m256 g[W], dv[W];
            for (int o = 0; o < W; o++) {
                const uint8_t *b = wj[o] + sb * 210;
                const __m256 d = _mm256_set1_ps(lp_f16_to_f32(lp_rd16(b + 208)));
                dv[o] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 192 + 8 * n)))));
                __m256i w[4], v[8];
                q6k_half(b + 64 * n, b + 128 + 32 * n, w);
                for (int j = 0; j < 4; j++) {
                    const __m256i q = _mm256_sub_epi8(w[j], _mm256_set1_epi8(32));
                    const __m256i *x = (const __m256i *)(xq + 32 * j);
                    v[2 * j] = d1_dot16(lo16(q), _mm256_loadu_si256(x));
                    v[2 * j + 1] = d1_dot16(hi16(q), _mm256_loadu_si256(x + 1));
                }
                g[o] = _mm256_cvtepi32_ps(d1_sum8x8(v));
            }
            d1_tr8(g), d1_tr8(dv);
            for (int t = 0; t < 8; t++)
                acc = _mm256_fmadd_ps(g[t], _mm256_mul_ps(dv[t], _mm256_set1_ps(xr->s[8 * sb + 4 * n + t / 2])), acc);
        }
    }
    _mm256_storeu_ps(out, acc);
}

/* rows o..o+nw-1 decoded (the lanes' row16: lp_unpack_row16, else the canonical form widened) */
static void d1_unpack(int type, const uint8_t *w, int64_t rb, int64_t o, int nw, int64_t n_in, void *scratch,
                      const int16_t **w16, lp_wrow *wr, const lp_wrow **wrp) {
    for (int j = 0; j < W; j++) {
        char *at = (char *)scratch + j * d1_row_bytes(n_in);
        wr[j] = lp_wrow_at(at, n_in);
        int16_t *q16 = (int16_t *)(((uintptr_t)(at + lp_wrow_bytes(n_in)) + 63) & ~(uintptr_t)63);
        w16[j] = q16, wrp[j] = &wr[j];
        if (j >= nw) { /* past the last row: the last row again (its outputs unused) */
            w16[j] = w16[nw - 1], wrp[j] = wrp[nw - 1];
            continue;
        }
        const uint8_t *row = w + (o + j) * rb;
        if (lp_unpack_row16(type, row, n_in, q16, wr[j].d16, wr[j].m16)) continue;
        lp_unpack_row(type, row, n_in, wr[j]);
        lp_widen_q(wr[j].q, n_in, q16);
    }
}

void lp_det1_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xrows *xr,
                   float *y, int accumulate, void *scratch) {
    const int64_t rb = lp_row_bytes(type, n_in);
    const int g16 = lp_g16(type), has_min = lp_has_min(type);
    float t[W];
    for (int64_t o = o0; o < o1; o += W) {
        const int nw = (int)(o1 - o < W ? o1 - o : W);
        const uint8_t *wj[W];
        for (int j = 0; j < W; j++) wj[j] = w + (o + (j < nw ? j : nw - 1)) * rb;
        /* the rows two passes ahead on their way while this pass computes */
        const int64_t pb = o + 2 * W < n_out ? o + 2 * W : n_out, pe = o + 3 * W < n_out ? o + 3 * W : n_out;
        const char *pf = (const char *)(((uintptr_t)(w + pb * rb)) & ~(uintptr_t)63);
        const int64_t pf_lines = pe > pb ? ((const char *)(w + pe * rb) - pf + 63) / 64 : 0;
        switch (type) {
        case LP_Q4_0: det1_32(LP_Q4_0, wj, n_in / 32, xr, pf, pf_lines, t); break;
        case LP_Q4_1: det1_32(LP_Q4_1, wj, n_in / 32, xr, pf, pf_lines, t); break;
        case LP_Q5_0: det1_32(LP_Q5_0, wj, n_in / 32, xr, pf, pf_lines, t); break;
        case LP_Q5_1: det1_32(LP_Q5_1, wj, n_in / 32, xr, pf, pf_lines, t); break;
        case LP_Q8_0: det1_32(LP_Q8_0, wj, n_in / 32, xr, pf, pf_lines, t); break;
        case LP_Q4_K: det1_k45(LP_Q4_K, wj, n_in / 256, xr, t); break;
        case LP_Q5_K: det1_k45(LP_Q5_K, wj, n_in / 256, xr, t); break;
        case LP_Q6_K: det1_q6k(wj, n_in / 256, xr, t); break;
        default: {
            const int16_t *w16[W];
            lp_wrow wr[W];
            const lp_wrow *wrp[W];
            d1_unpack(type, w, rb, o, nw, n_in, scratch, w16, wr, wrp);
            if (g16 && has_min) det1_16(1, 1, w16, wrp, n_in, xr, t);
            else if (g16) det1_16(1, 0, w16, wrp, n_in, xr, t);
            else if (has_min) det1_16(0, 1, w16, wrp, n_in, xr, t);
            else det1_16(0, 0, w16, wrp, n_in, xr, t);
        }
        }
        for (int j = 0; j < nw; j++) y[o + j] = accumulate ? y[o + j] + t[j] : t[j];
    }
}
#else
void lp_det1_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xrows *xr,
                   float *y, int accumulate, void *scratch) {
    (void)type, (void)w, (void)o0, (void)o1, (void)n_out, (void)n_in, (void)xr, (void)y, (void)accumulate, (void)scratch;
}
#endif
