/* The Q4_K / Q6_K products of a batched decode's 2..127 rows against ggml's Q8_K activations on
 * AVX-512 VNNI (mm.c q8kz_chunk), in place of the int16 lanes' one vpmaddwd (32 MACs) per 32
 * MACs.  Sixteen weight rows a pass, one per int32 lane: each super-block of the sixteen is
 * transposed once (q8kz_tr16: 4 bytes of each row a vector, nibbles / 6-bit values into bytes;
 * the scales and minimums likewise, a row's in its lane) and read from L1 by every activation
 * row, four rows a pass; an activation row's 4 bytes are vpdpbusd's embedded broadcast, so the
 * only shuffles are the transpose's (the 4-rows-a-pass form of before spent a vbroadcasti32x4 per
 * vpdpbusd and a vpackssdw per two, on the vector pipes the vpdpbusd shares).  The integers are
 * those of that form, lane for lane: each weight row keeps four int32 sums per super-block
 * (vector j of the four: Q4_K j = 0, 1 the even sub-blocks' values {0..7, 16..23} and
 * {8..15, 24..31} of 32, j = 2, 3 the odd ones'; Q6_K the same of 16: {0..7}, {8..15}), each a
 * chain of vpdpbusd (Q4_K 16 products, |s| <= 16 * 15 * 128 = 30720: one vpdpwssd by (scale, 0)
 * int16 pairs; Q6_K 8 products, 64512: vpmulld by the int8 scale), scaled per super-block by the
 * row's d (Q4_K also its dmin times the minimums against bs8's sums per 32; Q6_K's -32 through
 * bs8's sums per 16) and the activation row's d8, in the same float steps, and the four added up
 * at the end as (s0 + s1) + (s2 + s3). */
#include "q8kz_x86.h"

#include "blocks_x86.h"
#include "lp_cpu.h"

static int q8kz_on = 1; /* lp_q8kz_set */

int lp_q8kz_set(int on) {
    const int was = q8kz_on;
    q8kz_on = on != 0;
    return was;
}

int lp_q8kz_takes(int64_t n) {
#if defined(LP_Q8KZ)
    /* 2-4 rows only where their one-row kernels read Q8_K too (lp_cpu_q8k_few: not on AMD Zen 4,
     * whose split int16 form they keep; q8kz's few rows there unmeasured) */
    return q8kz_on && n >= LP_Q8KZ_FEW && n < LP_DENSE_ROWS && (n >= LP_F32_ROWS || lp_cpu_q8k_few());
#else
    (void)n;
    return 0;
#endif
}

int lp_q8kz_routes(int type, int64_t n) {
    const int64_t least = type == LP_Q4_K ? LP_Q8KZ_Q4K : type == LP_Q6_K ? LP_Q8KZ_Q6K : LP_DENSE_ROWS;
    return lp_q8kz_takes(n) && n >= least;
}

#if defined(LP_Q8KZ)

/* One super-block of the 16 weight rows, row v in int32 lane v: t[q] values 4q .. 4q + 3 (bytes,
 * Q6_K's before its -32); sc[s] sub-block s's scale: Q4_K (scale, 0) int16 pairs, Q6_K int32;
 * m[j]: int16 pairs, Q4_K minimums (2j, 2j + 1), Q6_K scales (2j, 2j + 1) and m[4 + j] (8 + 2j,
 * 9 + 2j); d, dm: each row's d and dmin (Q4_K). */
typedef struct {
    __m512i t[64], sc[16], m[8];
    __m512 d, dm;
} q8kz_sb;

/* r[d] <- dword d of r[0..16) (a 16 x 16 transpose of int32: lane v of the result row v's) */
LP_INLINE void q8kz_tr16(__m512i *r) {
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* u[4i + k], 128-bit lane L: rows 4i .. 4i + 3's dword 4L + k */
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i a0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x88), a1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xdd);
        const __m512i a2 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x88), a3 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xdd);
        r[k] = _mm512_shuffle_i32x4(a0, a2, 0x88), r[8 + k] = _mm512_shuffle_i32x4(a0, a2, 0xdd);
        r[4 + k] = _mm512_shuffle_i32x4(a1, a3, 0x88), r[12 + k] = _mm512_shuffle_i32x4(a1, a3, 0xdd);
    }
}

/* 16 bytes at p[v] into 128-bit lane v */
LP_INLINE __m512i lanes4(const uint8_t *p0, const uint8_t *p1, const uint8_t *p2, const uint8_t *p3) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)p1), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)p2), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)p3), 3);
}

/* e[k] <- dword k (< 4) of each row's 16 bytes at b[v] + off, row v in lane v */
LP_INLINE void dwords16(const uint8_t *const *b, int off, __m512i *e) {
    __m512i z[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) z[g] = lanes4(b[4 * g] + off, b[4 * g + 1] + off, b[4 * g + 2] + off, b[4 * g + 3] + off);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) { /* lanes 0-7: rows 0-7 (of z[0], z[1]) / 8-15 (z[2], z[3]), dword k */
        const __m512i idx = _mm512_setr_epi32(k, 4 + k, 8 + k, 12 + k, 16 + k, 20 + k, 24 + k, 28 + k, k, 4 + k, 8 + k, 12 + k, 16 + k,
                                              20 + k, 24 + k, 28 + k);
        e[k] = _mm512_shuffle_i64x2(_mm512_permutex2var_epi32(z[0], idx, z[1]), _mm512_permutex2var_epi32(z[2], idx, z[3]), 0x44);
    }
}

/* vpshufb control: each dword's bytes (a, b, c, e) of itself (< 0: zero) */
LP_INLINE __m512i ctl4(int a, int b, int c, int e) {
    char t[16];
    for (int i = 0; i < 4; i++) {
        const int s[4] = {a, b, c, e};
        for (int k = 0; k < 4; k++) t[4 * i + k] = (char)(s[k] < 0 ? 0x80 : 4 * i + s[k]);
    }
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

/* f16 word h (0, 1) of each lane of e as float */
LP_INLINE __m512 half16(__m512i e, int h) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(e, 16 * h))); }

LP_INLINE void q4kz_pack(const uint8_t *const *b, q8kz_sb *o) {
    const __m512i m4 = _mm512_set1_epi8(15);
#pragma GCC unroll 2
    for (int half = 0; half < 2; half++) { /* qs dword 16 half + k: sub-blocks 2 (dw / 8) (low nibbles), + 1 (high) */
        __m512i r[16];
#pragma GCC unroll 16
        for (int v = 0; v < 16; v++) r[v] = _mm512_loadu_si512(b[v] + 16 + 64 * half);
        q8kz_tr16(r);
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            const int dw = 16 * half + k, q = 16 * (dw / 8) + dw % 8;
            o->t[q] = _mm512_and_si512(r[k], m4);
            o->t[q + 8] = _mm512_and_si512(_mm512_srli_epi16(r[k], 4), m4);
        }
    }
    __m512i e[4], s[4];
    dwords16(b, 0, e); /* d | dmin, scale bytes 0..11 */
    o->d = half16(e[0], 0), o->dm = half16(e[0], 1);
    /* ggml's get_scale_min_k4 per lane: bytes b0..b11 = e[1], e[2], e[3] */
    s[0] = _mm512_and_si512(e[1], _mm512_set1_epi8(63));                                                   /* scales 0-3 */
    s[2] = _mm512_and_si512(e[2], _mm512_set1_epi8(63));                                                   /* mins 0-3 */
    s[1] = _mm512_or_si512(_mm512_and_si512(e[3], _mm512_set1_epi8(15)),                                   /* scales 4-7 */
                           _mm512_and_si512(_mm512_srli_epi16(e[1], 2), _mm512_set1_epi8(0x30)));
    s[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(e[3], 4), _mm512_set1_epi8(15)),             /* mins 4-7 */
                           _mm512_and_si512(_mm512_srli_epi16(e[2], 2), _mm512_set1_epi8(0x30)));
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) o->sc[q] = _mm512_shuffle_epi8(s[q / 4], ctl4(q % 4, -1, -1, -1));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) o->m[j] = _mm512_shuffle_epi8(s[2 + j / 2], ctl4(2 * (j % 2), -1, 2 * (j % 2) + 1, -1));
}

LP_INLINE void q6kz_pack(const uint8_t *const *b, q8kz_sb *o) {
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    __m512i ql[32], qh[16];
#pragma GCC unroll 2
    for (int half = 0; half < 2; half++) {
#pragma GCC unroll 16
        for (int v = 0; v < 16; v++) ql[16 * half + v] = _mm512_loadu_si512(b[v] + 64 * half);
        q8kz_tr16(ql + 16 * half);
    }
#pragma GCC unroll 16
    for (int v = 0; v < 16; v++) qh[v] = _mm512_loadu_si512(b[v] + 128);
    q8kz_tr16(qh);
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) /* values 128 n + 4 L .. (blocks_x86.h q6k_half's four vectors, 4 bytes each) */
#pragma GCC unroll 8
        for (int L = 0; L < 8; L++) {
            const __m512i a = ql[16 * n + L], c = ql[16 * n + 8 + L], h = qh[8 * n + L];
            __m512i *t = o->t + 32 * n + L;
            t[0] = _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
            t[8] = _mm512_or_si512(_mm512_and_si512(c, m4), _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
            t[16] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4), _mm512_and_si512(h, m30));
            t[24] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(c, 4), m4), _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
        }
    __m512i e[4], f[4];
    dwords16(b, 192, e); /* the 16 int8 scales */
    dwords16(b, 194, f); /* f[3]'s high word: d (bytes 208, 209; the block's last) */
    o->d = half16(f[3], 1), o->dm = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int q = 0; q < 16; q++) o->sc[q] = _mm512_srai_epi32(_mm512_slli_epi32(e[q / 4], 24 - 8 * (q % 4)), 24);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) { /* scales 2j', 2j' + 1 (j' = j < 4 ? j : j + 0 .. : m[4 + j] scales 8 + 2j ..) */
        const int s0 = j < 4 ? 2 * j : 8 + 2 * (j - 4);
        o->m[j] = _mm512_srai_epi16(_mm512_shuffle_epi8(e[s0 / 4], ctl4(-1, s0 % 4, -1, s0 % 4 + 1)), 8);
    }
}

/* acc + vpdpbusd(w as u8, the 4 bytes at p as s8 in every lane): the instruction itself, p its
 * embedded broadcast (GCC 12 loaded _mm512_set1_epi32 apart and sank the chains' vpdpwssd below
 * every chain, spilling them) */
LP_INLINE __m512i dpx(__m512i acc, __m512i w, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
}

/* acc + vpdpwssd(a, b) (q8mm_512.inc q8_dp's reason) */
LP_INLINE __m512i dpw(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* acc + a b (int32 lanes): vpmulld + vpaddd as written (GCC 12 reassociated the adds of
 * _mm512_add_epi32 / _mm512_mullo_epi32 into a tree, every chain's sum spilled before it) */
LP_INLINE __m512i mla(__m512i acc, __m512i a, __m512i b) {
    __m512i t;
    __asm__("vpmulld %3, %2, %1\n\tvpaddd %1, %0, %0" : "+v"(acc), "=&v"(t) : "v"(a), "v"(b));
    return acc;
}

/* NA (1..4) activation rows x[0..NA) (a super-block's 256 int8 each, bs their sums per 16) against
 * o's sixteen rows: acc[4u + j] += d8[u] (d * isum - dmin * msum) (Q4_K), d8[u] d (isum - 32 corr)
 * (Q6_K), vector j of each row's four sums. */
LP_INLINE void q8kz_act(const int q4, const int NA, const q8kz_sb *o, const int8_t *const *x, const int16_t *const *bs,
                        const float *d8, __m512 *acc) {
    const __m512i z = _mm512_setzero_si512();
    __m512i is[4][4];
    for (int u = 0; u < NA; u++)
        for (int j = 0; j < 4; j++) is[u][j] = z;
    if (q4) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) { /* h 0: values {0..7, 16..23} of sub-block s, 1: {8..15, 24..31} */
                const int q0 = 8 * s + 2 * h;
                __m512i w0 = o->t[q0], w1 = o->t[q0 + 1], w2 = o->t[q0 + 4], w3 = o->t[q0 + 5], sc = o->sc[s];
                LP_IN_REG(w0);
                LP_IN_REG(w1);
                LP_IN_REG(w2);
                LP_IN_REG(w3);
                LP_IN_REG(sc);
#pragma GCC unroll 4
                for (int u = 0; u < NA; u++) {
                    const int8_t *xs = x[u] + 4 * q0;
                    const __m512i a = dpx(dpx(dpx(dpx(z, w0, xs), w1, xs + 4), w2, xs + 16), w3, xs + 20);
                    is[u][2 * (s % 2) + h] = dpw(is[u][2 * (s % 2) + h], a, sc);
                }
            }
#pragma GCC unroll 4
        for (int u = 0; u < NA; u++) {
            int32_t b8[4]; /* sums per 32, pairs (2j, 2j + 1) */
            _mm_storeu_si128((__m128i *)b8, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bs[u]), _mm_loadu_si128((const __m128i *)(bs[u] + 8))));
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m512i ms = _mm512_madd_epi16(o->m[j], _mm512_set1_epi32(b8[j]));
                const __m512 t = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), o->dm, _mm512_mul_ps(_mm512_cvtepi32_ps(is[u][j]), o->d));
                acc[4 * u + j] = _mm512_fmadd_ps(t, _mm512_set1_ps(d8[u]), acc[4 * u + j]);
            }
        }
    } else {
#pragma GCC unroll 16
        for (int s = 0; s < 16; s++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) { /* h 0: values 0..7 of sub-block s, 1: 8..15 */
                const int q0 = 4 * s + 2 * h;
                __m512i w0 = o->t[q0], w1 = o->t[q0 + 1], sc = o->sc[s];
                LP_IN_REG(w0);
                LP_IN_REG(w1);
                LP_IN_REG(sc);
#pragma GCC unroll 4
                for (int u = 0; u < NA; u++) {
                    const int8_t *xs = x[u] + 4 * q0;
                    const __m512i a = dpx(dpx(z, w0, xs), w1, xs + 4);
                    is[u][2 * (s % 2) + h] = mla(is[u][2 * (s % 2) + h], a, sc);
                }
            }
#pragma GCC unroll 4
        for (int u = 0; u < NA; u++) {
            int32_t p[8]; /* bs8's pairs (2j, 2j + 1) */
            memcpy(p, bs[u], 32);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m512i c = _mm512_add_epi32(_mm512_madd_epi16(o->m[j], _mm512_set1_epi32(p[j])),
                                                   _mm512_madd_epi16(o->m[4 + j], _mm512_set1_epi32(p[4 + j])));
                const __m512i si = _mm512_sub_epi32(is[u][j], _mm512_slli_epi32(c, 5));
                acc[4 * u + j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(si), o->d), _mm512_set1_ps(d8[u]), acc[4 * u + j]);
            }
        }
    }
}

LP_INLINE void q8kz_run(const int q4, const uint8_t *const *w, int64_t nsb, int64_t pf, const lp_xrows *xr, const int64_t *rows,
                        int nr, float *y) {
    __m512 acc[4 * LP_DENSE_ROWS];
    for (int t = 0; t < 4 * nr; t++) acc[t] = _mm512_setzero_ps();
    const int64_t bb = q4 ? 144 : 210;
    for (int64_t i = 0; i < nsb; i++) {
        q8kz_sb o;
        const uint8_t *b[16];
        for (int v = 0; v < 16; v++) b[v] = w[v] + i * bb;
        if (pf) { /* the next pass's lines (pf past these rows, its rows' bytes contiguous), 1 / nsb of them a super-block */
            const char *p0 = (const char *)w[0] + pf, *e = p0 + LP_Q8KZ_W * nsb * bb;
            const char *p = (const char *)((uintptr_t)(p0 + LP_Q8KZ_W * bb * i) & ~(uintptr_t)63), *pe = p0 + LP_Q8KZ_W * bb * (i + 1);
            for (; p < pe && p < e; p += 64) _mm_prefetch(p, _MM_HINT_T0);
        }
        if (q4) q4kz_pack(b, &o);
        else q6kz_pack(b, &o);
        for (int t = 0; t < nr; t += 4) { /* four activation rows a pass (the last 1..4) */
            const int8_t *x[4] = {NULL, NULL, NULL, NULL};
            const int16_t *bs[4] = {NULL, NULL, NULL, NULL};
            float d8[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int u = 0; u < 4 && t + u < nr; u++) {
                const int64_t r = rows[t + u];
                x[u] = xr->q8 + r * xr->n_in + 256 * i, bs[u] = xr->bs8 + (r * nsb + i) * 16, d8[u] = xr->d8[r * nsb + i];
            }
            switch (nr - t) {
            case 1: q8kz_act(q4, 1, &o, x, bs, d8, acc + 4 * t); break;
            case 2: q8kz_act(q4, 2, &o, x, bs, d8, acc + 4 * t); break;
            case 3: q8kz_act(q4, 3, &o, x, bs, d8, acc + 4 * t); break;
            default: q8kz_act(q4, 4, &o, x, bs, d8, acc + 4 * t);
            }
        }
    }
    for (int t = 0; t < nr; t++)
        _mm512_storeu_ps(y + LP_Q8KZ_W * t, _mm512_add_ps(_mm512_add_ps(acc[4 * t], acc[4 * t + 1]), _mm512_add_ps(acc[4 * t + 2], acc[4 * t + 3])));
}

void lp_q8kz_rows(int type, int nw, const uint8_t *const *w, int64_t nsb, int64_t pf, const lp_xrows *xr, const int64_t *rows,
                  int nr, float *y) {
    const uint8_t *w16[LP_Q8KZ_W];
    for (int v = 0; v < LP_Q8KZ_W; v++) w16[v] = w[v < nw ? v : nw - 1]; /* fewer than 16: the last repeated, its sums dropped */
    if (type == LP_Q4_K) q8kz_run(1, w16, nsb, pf, xr, rows, nr, y);
    else q8kz_run(0, w16, nsb, pf, xr, rows, nr, y);
}

#else
void lp_q8kz_rows(int type, int nw, const uint8_t *const *w, int64_t nsb, int64_t pf, const lp_xrows *xr, const int64_t *rows,
                  int nr, float *y) {
    (void)type, (void)nw, (void)w, (void)nsb, (void)pf, (void)xr, (void)rows, (void)nr, (void)y;
}
#endif
