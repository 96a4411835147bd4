/* Deterministic mode's products of the 32-element types at the AVX-512 level (rows_det_x86.c
 * takes them from here): the activations quantized per row to int8 with one scale per block of
 * 32 (lp_x8_row: ggml's Q8_0 / Q8_1, which llama.cpp's own products of these types use), the
 * weights as unsigned bytes q + off (lp_det8_bytes: Q4_0 +8, Q5_0 +16, Q8_0 +128), and per
 * (row, output) and block of 32, in block order:
 *
 *   i   = the exact int32 sum of (q_w[k] + off) q_x[k] over the block, less off x the block's
 *         exact sum of q_x (qs): the exact sum of q_w q_x     (any instruction order)
 *   acc = fmaf((float)i, d_w * d_x, acc)                      (d_w * d_x rounded once)
 *   acc = fmaf(sum_x, m_w, acc)                               (Q4_1 / Q5_1; sum_x = d_x * qs)
 *
 * One row (a decode): det8_row_x86.c.  Two rows or more (here): the rows in the 16 lanes of a
 * zmm (lp_x8's lq), a weight quad broadcast to every lane, one vpdpbusd adding 16 rows x 4
 * products (the int16 lanes' vpdpwssd add 16 x 2), the float steps per lane.  A lane is one
 * row's sequence alone, so any row count gives the same bits (tests/test_deterministic_kernels.py).
 * The int8 rounding of x costs accuracy against the int16 lanes (llama.cpp's own), bounded in
 * the same test. */
#include "det8_x86.h"
#include "det8_avx2_x86.h"
#include "det8_row_x86.h"
#include "q8_avx2.h"

#define NL8 16   /* rows per lane group */
#define TW8 4    /* weight rows per tile */
#define YB8_LD 20 /* a buffered output row's floats (a chunk of 16 and a tile's 4 columns past it) */
#define YB8_ROWS 512

#if defined(LP_AVX512) || defined(LP_AVX2)
static void *al64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

int lp_det8_covers(int type) {
#if !defined(LP_AVX512) /* AVX2: Q8_0 signed (LP_DET8_Q8_SIGNED) or AVX-VNNI's vpdpbusd; the K-quants (det8_avx2_x86.c) */
    if (type == LP_Q8_0 || type == LP_Q4_K || type == LP_Q5_K || type == LP_Q6_K) return 1;
#elif defined(LP_VNNI)
    if (type == LP_Q8_0) return 1;
#endif
    return type == LP_Q4_0 || type == LP_Q4_1 || type == LP_Q5_0 || type == LP_Q5_1;
}

size_t lp_x8_bytes(int64_t n_in, int64_t n) {
    const int64_t nb = n_in / 32, ng = n > 1 ? (n + NL8 - 1) / NL8 : 0;
    return (size_t)((n + 15) / 16 * 16 * n_in + n * nb * 12 + ng * NL8 * n_in + ng * NL8 * nb * 12) + 6 * 64;
}

lp_x8 lp_x8_at(void *buf, int64_t n_in, int64_t n) {
    lp_x8 p;
    const int64_t nb = n_in / 32;
    p.n_in = n_in, p.n = n, p.n_grp = n > 1 ? (n + NL8 - 1) / NL8 : 0;
    p.lq = (int32_t *)al64(buf);
    p.ld = (float *)al64(p.lq + p.n_grp * NL8 * (n_in / 4));
    p.lsum = p.ld + p.n_grp * NL8 * nb;
    p.lqs = (int32_t *)al64(p.lsum + p.n_grp * NL8 * nb);
    p.d = (float *)al64(p.lqs + p.n_grp * NL8 * nb);
    p.sum = p.d + n * nb;
    p.qs = (int32_t *)(p.sum + n * nb);
    p.q = (int8_t *)al64(p.qs + n * nb);
    p.tiles = 0;
    memset(p.q + n * n_in, 0, (size_t)((n + 15) / 16 * 16 - n) * (size_t)n_in); /* AMX's A tiles read 16 rows */
    return p;
}

/* As lp_prepare_x_row with 127 for LP_XQ_MAX: per block, d = max |x| / 127, q = x 127 / max |x|
 * rounded to nearest even (vcvtps2dq under the default rounding mode, as rintf). */
#if defined(LP_AVX512)
/* lane i of the result: v[i]'s 16 lanes reduced by OP (max_ps or add_epi32 on the bits: both exact,
 * any order the same) */
#define LP_REDUCE16(NAME, OP)                                                                                           \
    LP_INLINE __m512 NAME(const __m512 *v) {                                                                           \
        __m512 a[8], b[4], c[2];                                                                                       \
        for (int k = 0; k < 8; k++)                                                                                    \
            a[k] = OP(_mm512_shuffle_f32x4(v[k], v[k + 8], 0x44), _mm512_shuffle_f32x4(v[k], v[k + 8], 0xEE));         \
        for (int k = 0; k < 4; k++)                                                                                    \
            b[k] = OP(_mm512_shuffle_f32x4(a[k], a[k + 4], 0x88), _mm512_shuffle_f32x4(a[k], a[k + 4], 0xDD));         \
        for (int k = 0; k < 2; k++) c[k] = OP(_mm512_unpacklo_ps(b[k], b[k + 2]), _mm512_unpackhi_ps(b[k], b[k + 2])); \
        const __m512 d = OP(_mm512_shuffle_ps(c[0], c[1], 0x44), _mm512_shuffle_ps(c[0], c[1], 0xEE));                \
        /* lane 4 L + e held v[(0, 8, 4, 12)[L] + (0, 2, 1, 3)[e]] */                                                  \
        return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), d);      \
    }
#define ADD_BITS(a, b) _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)))
LP_REDUCE16(max16, _mm512_max_ps)
LP_REDUCE16(add16, ADD_BITS)
#undef ADD_BITS
#undef LP_REDUCE16

/* Blocks b .. b + 16 of row r: the one-block loop below on 16 blocks at once (the same numbers:
 * the maxima and integer sums exact, 127 / mx and mx / 127 the same IEEE divisions in lanes). */
static void x8_row16(const float *x, const lp_x8 *p, int64_t r, int64_t b) {
    const int64_t n_in = p->n_in, nb = n_in / 32;
    const __m512 abs = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
    __m512 m[16], s[16];
    for (int i = 0; i < 16; i++) {
        const float *xb = x + 32 * (b + i);
        m[i] = _mm512_max_ps(_mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(xb), abs), _mm512_setzero_ps()),
                             _mm512_and_ps(_mm512_loadu_ps(xb + 16), abs));
    }
    const __m512 mx = max16(m), k127 = _mm512_set1_ps(127.0f);
    float inv[16] __attribute__((aligned(64)));
    _mm512_store_ps(inv, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(mx, _mm512_setzero_ps(), _CMP_GT_OQ), k127, mx));
    for (int i = 0; i < 16; i++) {
        const float *xb = x + 32 * (b + i);
        const __m512 iv = _mm512_set1_ps(inv[i]);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb), iv));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), iv));
        q0 = _mm512_max_epi32(_mm512_min_epi32(q0, lim), nlim);
        q1 = _mm512_max_epi32(_mm512_min_epi32(q1, lim), nlim);
        int8_t *qb = p->q + r * n_in + 32 * (b + i);
        _mm_storeu_si128((__m128i *)qb, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qb + 16), _mm512_cvtepi32_epi8(q1));
        s[i] = _mm512_castsi512_ps(_mm512_add_epi32(q0, q1));
    }
    const __m512 d = _mm512_div_ps(mx, k127);
    const __m512i qs = _mm512_castps_si512(add16(s));
    _mm512_storeu_ps(p->d + r * nb + b, d);
    _mm512_storeu_si512(p->qs + r * nb + b, qs);
    _mm512_storeu_ps(p->sum + r * nb + b, _mm512_mul_ps(d, _mm512_cvtepi32_ps(qs)));
}

void lp_x8_row(const float *x, const lp_x8 *p, int64_t r) {
    const int64_t n_in = p->n_in, nb = n_in / 32;
    const __m512 abs = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
    int64_t b0 = 0;
    for (; b0 + 16 <= nb; b0 += 16) x8_row16(x, p, r, b0);
    for (int64_t b = b0; b < nb; b++) {
        const float *xb = x + 32 * b;
        const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
        const __m512 m = _mm512_max_ps(_mm512_max_ps(_mm512_and_ps(x0, abs), _mm512_setzero_ps()), _mm512_and_ps(x1, abs));
        const float mx = _mm512_reduce_max_ps(m);
        const float inv = mx > 0.0f ? 127.0f / mx : 0.0f;
        const __m512 iv = _mm512_set1_ps(inv);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, iv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, iv));
        q0 = _mm512_max_epi32(_mm512_min_epi32(q0, lim), nlim);
        q1 = _mm512_max_epi32(_mm512_min_epi32(q1, lim), nlim);
        int8_t *qb = p->q + r * n_in + 32 * b;
        _mm_storeu_si128((__m128i *)qb, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qb + 16), _mm512_cvtepi32_epi8(q1));
        const float d = mx / 127.0f;
        p->d[r * nb + b] = d;
        const int32_t qs = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        p->qs[r * nb + b] = qs;
        p->sum[r * nb + b] = d * (float)qs;
    }
}
#else /* the same integers and floats on ymm */
void lp_x8_row(const float *x, const lp_x8 *p, int64_t r) {
    const int64_t n_in = p->n_in, nb = n_in / 32;
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        __m256 xv[4], m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) xv[i] = _mm256_loadu_ps(xb + 8 * i), m = _mm256_max_ps(m, _mm256_and_ps(xv[i], abs));
        const float mx = q8_hmax(m);
        const float inv = mx > 0.0f ? 127.0f / mx : 0.0f;
        const __m256 iv = _mm256_set1_ps(inv);
        __m256i q[4];
        for (int i = 0; i < 4; i++) q[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(xv[i], iv)), lim), nlim);
        q8_store_i8(p->q + r * n_in + 32 * b, q);
        const float d = mx / 127.0f;
        p->d[r * nb + b] = d;
        const int32_t qs = q8_hsum_i(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        p->qs[r * nb + b] = qs;
        p->sum[r * nb + b] = d * (float)qs;
    }
}
#endif

void lp_x8_lanes_block(const lp_x8 *p, int64_t b) {
    const int64_t n_in = p->n_in, nb = n_in / 32, nq = n_in / 4;
    for (int64_t li = 0; li < p->n_grp * NL8; li++) {
        const int64_t g = li / NL8, lane = li % NL8;
        int32_t *lq = p->lq + (g * nq + 8 * b) * NL8 + lane;
        float *ld = p->ld + (g * nb + b) * NL8 + lane, *ls = p->lsum + (g * nb + b) * NL8 + lane;
        int32_t *lqs = p->lqs + (g * nb + b) * NL8 + lane;
        if (li < p->n) {
            const int8_t *q = p->q + li * n_in + 32 * b;
            for (int k = 0; k < 8 && !p->tiles; k++) memcpy(lq + NL8 * k, q + 4 * k, 4); /* AMX reads q itself */
            *ld = p->d[li * nb + b], *ls = p->sum[li * nb + b], *lqs = p->qs[li * nb + b];
        } else { /* zeros: no garbage (subnormal) scales in the float steps */
            for (int k = 0; k < 8 && !p->tiles; k++) lq[NL8 * k] = 0;
            *ld = *ls = 0.0f;
            *lqs = 0;
        }
    }
}

lp_x8 lp_x8_slice(const lp_x8 *p, int64_t r0, int64_t n) {
    lp_x8 s = *p;
    const int64_t g = r0 / NL8, nb = p->n_in / 32;
    s.n = n, s.n_grp = (n + NL8 - 1) / NL8;
    s.q += r0 * p->n_in, s.d += r0 * nb, s.sum += r0 * nb, s.qs += r0 * nb;
    s.lq += g * NL8 * (p->n_in / 4), s.ld += g * NL8 * nb, s.lsum += g * NL8 * nb, s.lqs += g * NL8 * nb;
    return s;
}

/* a weight row's room in scratch: its nibbles as bytes in element order, d and m per block */
static size_t w8_bytes(int64_t n_in) { return (size_t)n_in + (size_t)(n_in / 32) * 8 + 128; }
int lp_det8_offset(int type) {
#if defined(LP_DET8_Q8_SIGNED)
    if (type == LP_Q8_0) return 0;
#endif
    return type == LP_Q4_0 ? 8 : type == LP_Q5_0 ? 16 : type == LP_Q8_0 ? 128 : 0;
}

#if defined(LP_AVX512)
size_t lp_det8_scratch_bytes(int64_t n_in) { return 8 * w8_bytes(n_in) + (size_t)YB8_ROWS * YB8_LD * 4 + 128; }

LP_INLINE __m512i dpbusd512(__m512i acc, __m512i u, __m512i s) {
#if defined(LP_VNNI)
    return _mm512_dpbusd_epi32(acc, u, s);
#else /* exact: |u s + u s| <= 2 31 127 fits int16 (Q8_0 only with VNNI) */
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

/* Four vectors of lanes as rows: row r's four at y[r ldy] (as lanes_x86.c store_rows4). */
LP_INLINE void rows4(__m512 a0, __m512 a1, __m512 a2, __m512 a3, float *y, int64_t ldy) {
    const __m512 t0 = _mm512_unpacklo_ps(a0, a1), t1 = _mm512_unpackhi_ps(a0, a1);
    const __m512 t2 = _mm512_unpacklo_ps(a2, a3), t3 = _mm512_unpackhi_ps(a2, a3);
    const __m512 r[4] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE), _mm512_shuffle_ps(t1, t3, 0x44),
                         _mm512_shuffle_ps(t1, t3, 0xEE)};
    for (int m = 0; m < 4; m++) {
        _mm_storeu_ps(y + m * ldy, _mm512_castps512_ps128(r[m]));
        _mm_storeu_ps(y + (4 + m) * ldy, _mm512_extractf32x4_ps(r[m], 1));
        _mm_storeu_ps(y + (8 + m) * ldy, _mm512_extractf32x4_ps(r[m], 2));
        _mm_storeu_ps(y + (12 + m) * ldy, _mm512_extractf32x4_ps(r[m], 3));
    }
}

/* NW weight rows (u[j] = q + off, d[j], m[j]) against NG (1, 2) lane groups from g0: row 16 i +
 * lane's outputs at y[(16 i + lane) ldy + j], j < 4 (columns past NW: zeros).  MIN: the type has
 * a minimum (off 0), else the offset's part taken off each block's integer sums. */
LP_INLINE void tile8(const int NG, const int NW, const int MIN, int off, const uint8_t *const *u, const float *const *wd,
                     const float *const *wm, const lp_x8 *p, int64_t g0, float *y, int64_t ldy) {
    const int64_t n_in = p->n_in, nb = n_in / 32, nq = n_in / 4;
    const __m512i *xq[2];
    const float *dx[2], *sx[2];
    const int32_t *qx[2];
    const __m512i offv = _mm512_set1_epi32(off);
    for (int i = 0; i < NG; i++) {
        xq[i] = (const __m512i *)(p->lq + (g0 + i) * NL8 * nq);
        dx[i] = p->ld + (g0 + i) * NL8 * nb;
        sx[i] = p->lsum + (g0 + i) * NL8 * nb;
        qx[i] = p->lqs + (g0 + i) * NL8 * nb;
    }
    __m512 acc[2][TW8];
    for (int i = 0; i < NG; i++)
        for (int j = 0; j < NW; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i s[2][TW8], s2[TW8];
        for (int i = 0; i < NG; i++)
            for (int j = 0; j < NW; j++) s[i][j] = _mm512_setzero_si512();
        for (int j = 0; j < NW; j++) s2[j] = _mm512_setzero_si512();
        for (int k = 0; k < 8; k++) {
            __m512i xv[2];
            for (int i = 0; i < NG; i++) xv[i] = _mm512_load_si512(xq[i] + 8 * b + k);
            for (int j = 0; j < NW; j++) {
                int32_t wq;
                memcpy(&wq, u[j] + 32 * b + 4 * k, 4);
                const __m512i wv = _mm512_set1_epi32(wq);
                if (NG == 1 && (k & 1)) /* one group: even and odd quads in two chains (the same integers) */
                    s2[j] = dpbusd512(s2[j], wv, xv[0]);
                else
                    for (int i = 0; i < NG; i++) s[i][j] = dpbusd512(s[i][j], wv, xv[i]);
            }
        }
        if (NG == 1)
            for (int j = 0; j < NW; j++) s[0][j] = _mm512_add_epi32(s[0][j], s2[j]);
        for (int i = 0; i < NG; i++) {
            const __m512 dv = _mm512_loadu_ps(dx[i] + NL8 * b);
            if (!MIN) {
                const __m512i c = _mm512_mullo_epi32(_mm512_loadu_si512(qx[i] + NL8 * b), offv);
                for (int j = 0; j < NW; j++) s[i][j] = _mm512_sub_epi32(s[i][j], c);
            }
            for (int j = 0; j < NW; j++)
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i][j]), _mm512_mul_ps(_mm512_set1_ps(wd[j][b]), dv), acc[i][j]);
            if (MIN) {
                const __m512 sv = _mm512_loadu_ps(sx[i] + NL8 * b);
                for (int j = 0; j < NW; j++) acc[i][j] = _mm512_fmadd_ps(sv, _mm512_set1_ps(wm[j][b]), acc[i][j]);
            }
        }
    }
    const __m512 z = _mm512_setzero_ps();
    for (int i = 0; i < NG; i++)
        rows4(acc[i][0], NW > 1 ? acc[i][1] : z, NW > 2 ? acc[i][2] : z, NW > 3 ? acc[i][3] : z, y + NL8 * i * ldy, ldy);
}

#define TILE8_CASES(MIN)                                                                                       \
    switch (ng * 8 + nw) {                                                                                     \
    case 17: tile8(2, 1, MIN, off, u, wd, wm, p, g0, y, ldy); break;                                           \
    case 18: tile8(2, 2, MIN, off, u, wd, wm, p, g0, y, ldy); break;                                           \
    case 19: tile8(2, 3, MIN, off, u, wd, wm, p, g0, y, ldy); break;                                           \
    case 20: tile8(2, 4, MIN, off, u, wd, wm, p, g0, y, ldy); break;                                           \
    case 9: tile8(1, 1, MIN, off, u, wd, wm, p, g0, y, ldy); break;                                            \
    case 10: tile8(1, 2, MIN, off, u, wd, wm, p, g0, y, ldy); break;                                           \
    case 11: tile8(1, 3, MIN, off, u, wd, wm, p, g0, y, ldy); break;                                           \
    default: tile8(1, 4, MIN, off, u, wd, wm, p, g0, y, ldy); break;                                           \
    }
static void tile8_k(int has_min, int off, int ng, int nw, const uint8_t *const *u, const float *const *wd,
                    const float *const *wm, const lp_x8 *p, int64_t g0, float *y, int64_t ldy) {
    if (has_min) TILE8_CASES(1)
    else TILE8_CASES(0)
}
#undef TILE8_CASES

void lp_det8_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                   int64_t ldy, int accumulate, void *scratch) {
    if (p->n == 1) {
        lp_det8_row(type, w, o0, o1, n_out, p, y, accumulate);
        return;
    }
    const int64_t n_in = p->n_in, nb = n_in / 32, rb = bytes32(type) * nb, n = p->n, n_pad = p->n_grp * NL8;
    const int has_min = type == LP_Q4_1 || type == LP_Q5_1, off = lp_det8_offset(type);
    uint8_t *u[TW8];
    float *wd[TW8], *wm[TW8];
    for (int j = 0; j < TW8; j++) {
        u[j] = (uint8_t *)al64((char *)scratch + j * w8_bytes(n_in));
        wd[j] = (float *)(u[j] + n_in), wm[j] = wd[j] + nb;
    }
    float *yb = (float *)al64((char *)scratch + 8 * w8_bytes(n_in)); /* [n_pad][YB8_LD]: each y row written once */
    const int buffered = n_pad <= YB8_ROWS;
    float t[2 * NL8 * 4];
    for (int64_t o = o0; o < o1; o += TW8) {
        const int nw = (int)(o1 - o < TW8 ? o1 - o : TW8);
        for (int j = 0; j < nw; j++) lp_det8_unpack(type, w + (o + j) * rb, n_in, u[j], wd[j], wm[j]);
        lp_det8_prefetch_rows(w, o + TW8, o + 2 * TW8 < o1 ? o + 2 * TW8 : o1, rb); /* the next rows come in while these compute */
        for (int64_t g = 0; g < p->n_grp; g += 2) {
            const int ng = g + 1 < p->n_grp ? 2 : 1;
            if (buffered) {
                tile8_k(has_min, off, ng, nw, (const uint8_t *const *)u, (const float *const *)wd, (const float *const *)wm, p, g,
                        yb + NL8 * g * YB8_LD + (o - o0), YB8_LD);
                continue;
            }
            tile8_k(has_min, off, ng, nw, (const uint8_t *const *)u, (const float *const *)wd, (const float *const *)wm, p, g, t, 4);
            for (int64_t i = 0; i < NL8 * ng && NL8 * g + i < n; i++)
                for (int j = 0; j < nw; j++) {
                    float *yo = y + (NL8 * g + i) * ldy + o + j;
                    *yo = accumulate ? *yo + t[4 * i + j] : t[4 * i + j];
                }
        }
    }
    if (buffered) { /* a chunk's row (at most 16 floats) in one masked store, no call to memcpy */
        const __mmask16 mk = (__mmask16)((1u << (o1 - o0 < 16 ? o1 - o0 : 16)) - 1);
        for (int64_t r = 0; r < n; r++) {
            float *yr = y + r * ldy + o0;
            const __m512 v = _mm512_maskz_loadu_ps(mk, yb + r * YB8_LD);
            _mm512_mask_storeu_ps(yr, mk, accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(mk, yr), v) : v);
        }
    }
}
#else /* AVX2: two rows or more take det8_avx2_x86.c's 8-lane tiles */
size_t lp_det8_scratch_bytes(int64_t n_in) { return (void)w8_bytes, lp_det8_scratch256_bytes(n_in); }
void lp_det8_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                   int64_t ldy, int accumulate, void *scratch) {
    if (p->n == 1 && (type == LP_Q4_K || type == LP_Q5_K || type == LP_Q6_K))
        lp_det8_row256_k45(type, w, o0, o1, n_out, p, y, accumulate);
    else if (p->n == 1)
        lp_det8_row(type, w, o0, o1, n_out, p, y, accumulate);
    else
        lp_det8_chunk256(type, w, o0, o1, p, y, ldy, accumulate, scratch);
}
#endif
#else
int lp_det8_covers(int type) { return (void)type, 0; }
int lp_det8_offset(int type) { return (void)type, 0; }
size_t lp_x8_bytes(int64_t n_in, int64_t n) { return (size_t)(n_in * n) * 0; }
lp_x8 lp_x8_at(void *buf, int64_t n_in, int64_t n) {
    lp_x8 p;
    memset(&p, 0, sizeof p);
    (void)buf, (void)n_in, (void)n;
    return p;
}
void lp_x8_row(const float *x, const lp_x8 *p, int64_t r) { (void)x, (void)p, (void)r; }
void lp_x8_lanes_block(const lp_x8 *p, int64_t b) { (void)p, (void)b; }
lp_x8 lp_x8_slice(const lp_x8 *p, int64_t r0, int64_t n) { return (void)r0, (void)n, *p; }
size_t lp_det8_scratch_bytes(int64_t n_in) { return (size_t)n_in * 0; }
void lp_det8_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                   int64_t ldy, int accumulate, void *scratch) {
    (void)type, (void)w, (void)o0, (void)o1, (void)n_out, (void)p, (void)y, (void)ldy, (void)accumulate, (void)scratch;
}
#endif
