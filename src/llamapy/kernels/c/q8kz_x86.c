/* The Q4_K / Q6_K products of a batched decode's 16..127 rows against ggml's Q8_K activations on
 * AVX-512 VNNI (mm.c q8kz_chunk), in place of the int16 lanes' one vpmaddwd (32 MACs) per 32
 * MACs.  Four weight rows a pass, one per 128-bit lane: a vector holds 16 values of each row, so
 * an activation row's 16 bytes are one vbroadcasti32x4, and vpdpbusd (64 MACs) sums them into
 * int32 lanes of 4 (Q6_K: 4 products, |s| <= 4 * 63 * 127 = 32004) or 8 (Q4_K: two vectors of a
 * sub-block, 8 * 15 * 127 = 15240) products; two sub-blocks' lanes packed to int16 (vpackssdw,
 * never saturating at those bounds) and ONE vpdpwssd by the sub-blocks' scales: Q4_K 5
 * multiplies per 256 MACs, Q6_K 3 per 128, where the lanes took 8 and 4.  Each super-block of
 * the four rows is unpacked once (nibbles / 6-bit values into bytes, the scales into int16 pairs)
 * and read from L1 by every activation row, two rows a pass.  The int32 sums keep four lanes per
 * weight row (lanes 4v .. 4v + 3), scaled per super-block by that row's d (Q4_K also its dmin
 * times the minimums against bs8's sums per 32; Q6_K's -32 through bs8's sums per 16) and the
 * activation row's d8, and added up at the end. */
#include "q8kz_x86.h"

#include "blocks_x86.h"

static int q8kz_on = 1; /* lp_q8kz_set */

int lp_q8kz_set(int on) {
    const int was = q8kz_on;
    q8kz_on = on != 0;
    return was;
}

int lp_q8kz_takes(int64_t n) {
#if defined(LP_Q8KZ)
    return q8kz_on && n >= LP_Q8KZ_MIN && n < LP_DENSE_ROWS;
#else
    (void)n;
    return 0;
#endif
}

#if defined(LP_Q8KZ)

/* The super-blocks ahead of the one computing whose lines are asked for (a block's lines as it
 * computes, not mm.c prefetch_ahead's burst before four rows: the burst stalled on full fill
 * buffers, 5% of the 16-row products' time) */
#ifndef LP_Q8KZ_PF
#define LP_Q8KZ_PF 8
#endif

/* One super-block of four weight rows, row v in 128-bit lane v: Q4_K w[2 s + h] (values
 * 16h .. 16h + 15 of sub-block s of 32), Q6_K w[g] (sub-block g of 16); sc[k]: int16 lanes 0-3
 * of each lane the scale of sub-block 2k (Q6_K; Q4_K k < 4: of 2k too), 4-7 of 2k + 1; m[]: the
 * corrections' factors in int16 (Q4_K m[0]: the 8 minimums; Q6_K: scales 0-7, 8-15); d, dm:
 * each row's d and dmin (Q4_K) in its four float lanes. */
typedef struct {
    __m512i w[16], sc[8], m[2];
    __m512 d, dm;
} q8kz_sb;

/* 16 bytes at p[v] into lane v */
LP_INLINE __m512i lanes4(const uint8_t *p0, const uint8_t *p1, const uint8_t *p2, const uint8_t *p3) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)p1), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)p2), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)p3), 3);
}

/* vpshufb control (every lane alike): int16 lanes 0-3 from byte a, 4-7 from byte b (run: lanes
 * i from byte a + i), zero-extended, or (hi) in the high byte for a sign-extending shift */
LP_INLINE __m512i ctl16(int a, int b, int run, int hi) {
    char c[16];
    for (int i = 0; i < 8; i++) {
        const int byte = run ? a + i : (i < 4 ? a : b);
        c[2 * i] = (char)(hi ? 0x80 : byte), c[2 * i + 1] = (char)(hi ? byte : 0x80);
    }
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)c));
}

LP_INLINE __m512i spread16(__m512i b, __m512i ctl, int sign) {
    const __m512i t = _mm512_shuffle_epi8(b, ctl);
    return sign ? _mm512_srai_epi16(t, 8) : t;
}

/* each row's half at byte offset `off` of its block, 4 times in its lane */
LP_INLINE __m512 halves4(const uint8_t *const *b, int off) {
    uint16_t h[4];
    for (int v = 0; v < 4; v++) memcpy(&h[v], b[v] + off, 2);
    const __m256i x = _mm256_setr_epi16((short)h[0], (short)h[0], (short)h[0], (short)h[0], (short)h[1], (short)h[1], (short)h[1],
                                        (short)h[1], (short)h[2], (short)h[2], (short)h[2], (short)h[2], (short)h[3], (short)h[3],
                                        (short)h[3], (short)h[3]);
    return _mm512_cvtph_ps(x);
}

LP_INLINE void q4kz_pack(const uint8_t *const *b, q8kz_sb *o) {
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512i a = _mm512_castsi128_si512(lp_k45_sc(b[0] + 4)); /* 8 scales | 8 mins per lane */
    a = _mm512_inserti32x4(a, lp_k45_sc(b[1] + 4), 1);
    a = _mm512_inserti32x4(a, lp_k45_sc(b[2] + 4), 2);
    a = _mm512_inserti32x4(a, lp_k45_sc(b[3] + 4), 3);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) o->sc[k] = spread16(a, ctl16(2 * k, 2 * k + 1, 0, 0), 0);
    o->m[0] = spread16(a, ctl16(8, 0, 1, 0), 0);
    o->d = halves4(b, 0), o->dm = halves4(b, 2);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) { /* bytes 32 (j / 2) + 16 (j % 2): sub-block j & ~1 the low nibbles, | 1 the high */
        const int off = 16 + 16 * j, s = 2 * (j / 2), h = j % 2;
        const __m512i q = lanes4(b[0] + off, b[1] + off, b[2] + off, b[3] + off);
        o->w[2 * s + h] = _mm512_and_si512(q, m4);
        o->w[2 * s + 2 + h] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    }
}

LP_INLINE void q6kz_pack(const uint8_t *const *b, q8kz_sb *o) {
    const __m512i s = lanes4(b[0] + 192, b[1] + 192, b[2] + 192, b[3] + 192);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) o->sc[k] = spread16(s, ctl16(2 * k, 2 * k + 1, 0, 1), 1);
    o->m[0] = spread16(s, ctl16(0, 0, 1, 1), 1), o->m[1] = spread16(s, ctl16(8, 0, 1, 1), 1);
    o->d = halves4(b, 208), o->dm = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
        __m256i h[4][4];
        for (int v = 0; v < 4; v++) q6k_half(b[v] + 64 * n, b[v] + 128 + 32 * n, h[v]);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) { /* values 128n + 32j ..: sub-blocks 8n + 2j (each row's low 16), 8n + 2j + 1 */
            const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(h[0][j]), h[1][j], 1);
            const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(h[2][j]), h[3][j], 1);
            o->w[8 * n + 2 * j] = _mm512_shuffle_i64x2(a, c, 0x88);
            o->w[8 * n + 2 * j + 1] = _mm512_shuffle_i64x2(a, c, 0xdd);
        }
    }
}

LP_INLINE __m512i bx16(const int8_t *p) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p)); }

/* NA (1, 2) activation rows x[0..NA) (a super-block's 256 int8 each, bs their sums per 16) against
 * o's four rows: acc[u] += d8[u] (d * isum - dmin * msum) per lane (Q4_K), d8[u] d (isum - 32 corr) (Q6_K). */
LP_INLINE void q8kz_act(const int q4, const int NA, const q8kz_sb *o, const int8_t *const *x, const int16_t *const *bs,
                        const float *d8, __m512 *acc) {
    const __m512i z = _mm512_setzero_si512();
    __m512i is[2] = {z, z};
    if (q4) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
#pragma GCC unroll 2
            for (int u = 0; u < NA; u++) {
                const int8_t *xs = x[u] + 64 * k;
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, o->w[4 * k], bx16(xs)), o->w[4 * k + 1], bx16(xs + 16));
                const __m512i p1 =
                    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, o->w[4 * k + 2], bx16(xs + 32)), o->w[4 * k + 3], bx16(xs + 48));
                is[u] = _mm512_dpwssd_epi32(is[u], _mm512_packs_epi32(p0, p1), o->sc[k]);
            }
        }
#pragma GCC unroll 2
        for (int u = 0; u < NA; u++) {
            const __m128i b8 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bs[u]), _mm_loadu_si128((const __m128i *)(bs[u] + 8)));
            const __m512i ms = _mm512_madd_epi16(o->m[0], _mm512_broadcast_i32x4(b8));
            const __m512 t = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), o->dm, _mm512_mul_ps(_mm512_cvtepi32_ps(is[u]), o->d));
            acc[u] = _mm512_fmadd_ps(t, _mm512_set1_ps(d8[u]), acc[u]);
        }
    } else {
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
#pragma GCC unroll 2
            for (int u = 0; u < NA; u++) {
                const int8_t *xs = x[u] + 32 * k;
                const __m512i p0 = _mm512_dpbusd_epi32(z, o->w[2 * k], bx16(xs));
                const __m512i p1 = _mm512_dpbusd_epi32(z, o->w[2 * k + 1], bx16(xs + 16));
                is[u] = _mm512_dpwssd_epi32(is[u], _mm512_packs_epi32(p0, p1), o->sc[k]);
            }
        }
#pragma GCC unroll 2
        for (int u = 0; u < NA; u++) {
            __m512i c = _mm512_madd_epi16(o->m[0], _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)bs[u])));
            c = _mm512_add_epi32(c, _mm512_madd_epi16(o->m[1], _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(bs[u] + 8)))));
            const __m512i si = _mm512_sub_epi32(is[u], _mm512_slli_epi32(c, 5));
            acc[u] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(si), o->d), _mm512_set1_ps(d8[u]), acc[u]);
        }
    }
}

LP_INLINE void q8kz_run(const int q4, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                        float *y, int nw) {
    __m512 acc[LP_DENSE_ROWS];
    for (int t = 0; t < nr; t++) acc[t] = _mm512_setzero_ps();
    const int64_t bb = q4 ? 144 : 210;
    for (int64_t i = 0; i < nsb; i++) {
        q8kz_sb o;
        const uint8_t *b[4] = {w[0] + i * bb, w[1] + i * bb, w[2] + i * bb, w[3] + i * bb};
        for (int v = 0; v < 4; v++) /* each row's block LP_Q8KZ_PF ahead (past a row's end: the next rows') */
            for (int64_t l = 0; l < bb + 63; l += 64) _mm_prefetch((const char *)b[v] + LP_Q8KZ_PF * bb + (l < bb ? l : bb - 1), _MM_HINT_T0);
        if (q4) q4kz_pack(b, &o);
        else q6kz_pack(b, &o);
        int t = 0;
        for (; t + 2 <= nr; t += 2) {
            const int8_t *x[2] = {xr->q8 + rows[t] * xr->n_in + 256 * i, xr->q8 + rows[t + 1] * xr->n_in + 256 * i};
            const int16_t *bs[2] = {xr->bs8 + (rows[t] * nsb + i) * 16, xr->bs8 + (rows[t + 1] * nsb + i) * 16};
            const float d8[2] = {xr->d8[rows[t] * nsb + i], xr->d8[rows[t + 1] * nsb + i]};
            q8kz_act(q4, 2, &o, x, bs, d8, acc + t);
        }
        if (t < nr) {
            const int8_t *x[1] = {xr->q8 + rows[t] * xr->n_in + 256 * i};
            const int16_t *bs[1] = {xr->bs8 + (rows[t] * nsb + i) * 16};
            const float d8[1] = {xr->d8[rows[t] * nsb + i]};
            q8kz_act(q4, 1, &o, x, bs, d8, acc + t);
        }
    }
    for (int t = 0; t < nr; t++) {
        float f[16];
        _mm512_storeu_ps(f, acc[t]);
        for (int v = 0; v < nw; v++) y[v * nr + t] = (f[4 * v] + f[4 * v + 1]) + (f[4 * v + 2] + f[4 * v + 3]);
    }
}

void lp_q8kz_rows(int type, int nw, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                  float *y) {
    const uint8_t *w4[4];
    for (int v = 0; v < 4; v++) w4[v] = w[v < nw ? v : nw - 1]; /* fewer than four: the last repeated, its sums dropped */
    if (type == LP_Q4_K) q8kz_run(1, w4, nsb, xr, rows, nr, y, nw);
    else q8kz_run(0, w4, nsb, xr, rows, nr, y, nw);
}

#else
void lp_q8kz_rows(int type, int nw, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                  float *y) {
    (void)type, (void)nw, (void)w, (void)nsb, (void)xr, (void)rows, (void)nr, (void)y;
}
#endif
