/* One activation row against weight rows straight from the GGUF blocks (x86): the decode
 * ubatch of a single sequence, where the weights stream from memory and every instruction per
 * block counts.  The 32-element types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) in row1z_x86.c; the
 * K-quants here on 256-bit vectors (AVX2, with AVX-VNNI's vpdpwssd at avx2+vnni, and the
 * AVX-512 level's VNNI on ymm registers) or in row1k_x86.c / row1q8k_x86.c.  The same integers
 * and scales as dot.c's canonical path (lp.h): per block of 32 the int16 dot of the weights'
 * integers with the activations' int16, times d * s, plus m * sum(x) where the type has a
 * minimum; the fp32 sums are taken in another order.  Types without a path here (Q2_K, Q3_K,
 * IQ4_NL, IQ4_XS, MXFP4, float types) return 0 and take the canonical path. */
#include "blocks_x86.h"
#include "row1_x86.h"
#include "row1k_x86.h"
#include "row1q8k_x86.h"
#include "row1z_x86.h"
#include "det8_x86.h"
#include "rows_det_x86.h"
#include "lanes8_x86.h"

static int row1_i8 = -1; /* lp_row1_i8_set: -1 the level's default (row1_x86.h) */
int lp_row1_i8_set(int on) { return row1_i8 = on < 0 ? -1 : !!on; }

#if defined(LP_AVX2) || defined(LP_AVX512)
/* The int32x8 dot of a sub-block's 32 int16 weights (wl, wh) with the activations at xq[0..32). */
LP_INLINE __m256i dot32(__m256i wl, __m256i wh, const int16_t *xq) {
    return lp_dot32x(wl, wh, _mm256_loadu_si256((const __m256i *)xq), _mm256_loadu_si256((const __m256i *)(xq + 16)));
}

LP_INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 8 scales (bytes 0..7) and 8 minimums (8..15) of a Q4_K / Q5_K super-block, 6 bits each,
 * from its 12 packed bytes (ggml's get_scale_min_k4 for all eight at once, on 32-bit words). */
LP_INLINE void k45_scales(const uint8_t *sc, uint32_t u[4]) {
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    memcpy(u, sc, 12);
    u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
    const uint32_t mins_lo = u[1] & m6;
    u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);
    u[2] = mins_lo;
    u[0] &= m6;
}

/* 8 bytes at p as 8 floats. */
LP_INLINE __m256 u8x8_ps(const void *p) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p))); }
LP_INLINE __m256 i8x8_ps(const void *p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p))); }

/* Lane j of v in every lane. */
LP_INLINE __m256 lane(__m256 v, int j) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j)); }

/* Q4_K / Q5_K: per super-block of 256, eight sub-blocks of 32 with 6-bit scales and mins.  The
 * scales are taken as vectors: the eight d * scale * s of a super-block in one product, each
 * sub-block's broadcast from it, and the minimums' dmin * min * sum(x) in one FMA a super-block
 * (a scalar chain per sub-block took about as long as the integer products). */
LP_INLINE float row1_k45(const int type, const uint8_t *row, int64_t nsb, const lp_xrows *xr, int64_t r) {
    const int bb = type == LP_Q4_K ? 144 : 176;
    const int16_t *xq = xr->q + r * xr->n_in;
    const float *s = xr->s + r * nsb * 8, *sum32 = xr->sum32 + r * nsb * 8;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), am = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *b = row + i * bb, *qs = b + (type == LP_Q4_K ? 16 : 48);
        uint32_t u[4];
        k45_scales(b + 4, u);
        const __m128 dd = f16x2_ps(b); /* d, dmin */
        const int64_t k = 8 * i; /* first sub-block of 32 */
        const __m256 sv = _mm256_mul_ps(_mm256_mul_ps(u8x8_ps(u), _mm256_broadcastss_ps(dd)), _mm256_loadu_ps(s + k));
        am = _mm256_fmadd_ps(_mm256_mul_ps(u8x8_ps(u + 2), _mm256_broadcastss_ps(_mm_movehdup_ps(dd))),
                             _mm256_loadu_ps(sum32 + k), am);
        __m256i hb = type == LP_Q5_K ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i wa, wb;
            k45_pair(type, qs + 32 * j, &hb, &wa, &wb);
            const int64_t ka = k + 2 * j, kb = ka + 1;
            a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot32(lo16(wa), hi16(wa), xq + 32 * ka)), lane(sv, 2 * j), a0);
            a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot32(lo16(wb), hi16(wb), xq + 32 * kb)), lane(sv, 2 * j + 1), a1);
        }
    }
    return hsum(_mm256_add_ps(a0, a1)) - hsum(am);
}

/* Q6_K: per super-block of 256, sixteen groups of 16 with int8 scales; values q - 32.  The
 * sixteen d * scale * s of a super-block as two vectors (group pairs of blocks 0-3, 4-7), each
 * group's broadcast from them. */
LP_INLINE float row1_q6_k(const uint8_t *row, int64_t nsb, const lp_xrows *xr, int64_t r) {
    const int16_t *xq = xr->q + r * xr->n_in;
    const float *s = xr->s + r * nsb * 8;
    const __m256i o32 = _mm256_set1_epi8(32), lo4 = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256i hi4 = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *b = row + i * 210;
        const __m256 d = _mm256_set1_ps(lp_f16_to_f32(lp_rd16(b + 208)));
        const __m256 sb = _mm256_mul_ps(d, _mm256_loadu_ps(s + 8 * i)); /* d s of blocks 0..7 */
        const __m256 sv[2] = {_mm256_mul_ps(i8x8_ps(b + 192), _mm256_permutevar8x32_ps(sb, lo4)),
                              _mm256_mul_ps(i8x8_ps(b + 200), _mm256_permutevar8x32_ps(sb, hi4))};
        for (int n = 0; n < 2; n++) {
            const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
            __m256i w[4];
            q6k_half(ql, qh, w);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m256i wj = _mm256_sub_epi8(w[j], o32);
                const int64_t kb = 8 * i + 4 * n + j; /* block of 32 */
                const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq + 32 * kb));
                const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 32 * kb + 16));
                const __m256i pl = _mm256_madd_epi16(lo16(wj), x0), ph = _mm256_madd_epi16(hi16(wj), x1);
                a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pl), lane(sv[n], 2 * j), a0);
                a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ph), lane(sv[n], 2 * j + 1), a1);
            }
        }
    }
    return hsum(_mm256_add_ps(a0, a1));
}

/* Weight rows per pass of lp_dot_row1xk: 4 for the 32-element types (row1z_x86.c), else 2. */
int lp_row1_pass(int type) { return lp_row1z_covers(type) ? 4 : 2; }

/* k (lp_row1_pass) consecutive weight rows from w0 (rb bytes each) against activation row r,
 * read together (each activation load feeds all): the 32-element types four rows
 * (row1z_x86.c), the K-quants two. */
int lp_dot_row1xk(int type, int k, const uint8_t *w0, int64_t rb, int64_t n_in, const lp_xrows *xr, int64_t r,
                  int64_t pf, float *y) {
    if (lp_row1z(type, k, w0, rb, n_in, xr, r, pf, y)) return 1;
    const uint8_t *w1 = w0 + rb;
    if (k != 2) return 0;
    switch (type) {
    case LP_Q4_K:
    case LP_Q5_K:
        if (!xr->qh) return 0;
        if (type == LP_Q4_K && xr->q8 && xr->q8on[r]) lp_rows_q8k(LP_Q4_K, 2, w0, w1, n_in / 256, xr, r, pf, y);
        else lp_row1x2_k45_split(type, w0, w1, n_in / 256, xr, r, pf, y);
        return 1;
    case LP_Q6_K:
        if (!xr->q8 || !xr->q8on[r]) return 0;
        lp_rows_q8k(LP_Q6_K, 2, w0, w1, n_in / 256, xr, r, pf, y);
        return 1;
    default: return 0;
    }
}

/* The K-quants' one-row kernels on the split activations prefetch their weights themselves,
 * a block's lines as it computes (the pf of lp_dot_row1 / lp_dot_row1xk): a row's lines asked
 * for in one burst before the row (mm.c prefetch_ahead) left memory idle while a long row
 * computed (Q4_K 2048 x 8192, 4.6 KB rows read two a pass, streamed at 17 GB/s where
 * 16384 x 2048 streamed at 30).  So do row1z_x86.c's passes of four rows for one activation
 * row at both x86 levels (a burst of four 4 KB rows before each pass: Q4_0 4096 x 4096
 * streamed 0.70x the 256-bit pairs that came before). */
int lp_row1_prefetches(int type, const lp_xrows *xr) {
    return ((type == LP_Q4_K || type == LP_Q5_K || type == LP_Q6_K) && xr->qh) || (lp_row1z_covers(type) && xr->n == 1);
}

int lp_dot_row1(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r, int64_t pf, float *y) {
    if (lp_row1z(type, 1, row, 0, n_in, xr, r, pf, y)) return 1; /* the 32-element types */
    switch (type) {
    case LP_Q4_K:
        if (xr->q8 && xr->q8on[r]) lp_rows_q8k(LP_Q4_K, 1, row, row, n_in / 256, xr, r, pf, y);
        else *y = xr->qh ? lp_row1_k45_split(LP_Q4_K, row, n_in / 256, xr, r, pf) : row1_k45(LP_Q4_K, row, n_in / 256, xr, r);
        return 1;
    case LP_Q5_K:
        *y = xr->qh ? lp_row1_k45_split(LP_Q5_K, row, n_in / 256, xr, r, pf) : row1_k45(LP_Q5_K, row, n_in / 256, xr, r);
        return 1;
    case LP_Q6_K:
        if (xr->q8 && xr->q8on[r]) lp_rows_q8k(LP_Q6_K, 1, row, row, n_in / 256, xr, r, pf, y);
        else *y = xr->qh ? lp_row1_q6_k_split(row, n_in / 256, xr, r, pf) : row1_q6_k(row, n_in / 256, xr, r);
        return 1;
    default: return 0;
    }
}
int lp_row1_i8(int type, int64_t n_in) {
    const int on = __atomic_load_n(&row1_i8, __ATOMIC_RELAXED);
#if defined(LP_LANES8) /* on by default where lanes8 takes the same types' 2+ rows (mm_xprep.inc lanes8_rows) */
    if (on < 0) return lp_lanes8_type(type) && lp_mm_det_covers(type, n_in);
#endif
    return on > 0 && lp_block_elems(type) == 32 && lp_det8_covers(type) && lp_mm_det_covers(type, n_in);
}
#else
int lp_row1_i8(int type, int64_t n_in) { return (void)type, (void)n_in, 0; }

int lp_row1_pass(int type) { return (void)type, 2; }

int lp_dot_row1xk(int type, int k, const uint8_t *w0, int64_t rb, int64_t n_in, const lp_xrows *xr, int64_t r,
                  int64_t pf, float *y) {
    (void)type, (void)k, (void)w0, (void)rb, (void)n_in, (void)xr, (void)r, (void)pf, (void)y;
    return 0;
}

int lp_row1_prefetches(int type, const lp_xrows *xr) {
    (void)type, (void)xr;
    return 0;
}

int lp_dot_row1(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r, int64_t pf, float *y) {
    (void)type, (void)row, (void)n_in, (void)xr, (void)r, (void)pf, (void)y;
    return 0;
}

#endif
