/* The K-quants' one-row products on x86 from the activations kept split (lp_xrows qh / ql:
 * xq = 256 qh + ql, two int8): a single-sequence decode's Q4_K / Q5_K / Q6_K rows, where the
 * weights stream from memory and the instructions per block bound the product.  The weights'
 * unsigned bytes (Q4_K's 0..15, Q5_K's 0..31, Q6_K's 0..63) are multiplied by each half as
 * bytes: one vpdpbusd each (AVX512-VNNI on ymm, AVX-VNNI), else vpmaddubsw + vpmaddwd (no
 * saturation: 2 * 63 * 128 < 32767), where the int16 form widened every weight byte to int16
 * first and took twice the products.  A super-block's eight int32x8 block dots are summed
 * across lanes as integers (a transpose of horizontal adds) into one vector of its eight block
 * sums, converted once and multiplied by the eight d * scale * s in one FMA (Q6_K: its sixteen
 * group sums, less 32 times the activations' integer sums, in two).  The same integers as the
 * int16 form (row1_x86.c); the fp32 sums are taken in another order. */
#include "row1k_x86.h"

#include "blocks_x86.h"

#if defined(LP_AVX2) || defined(LP_AVX512)

/* int32x8: lane i = sum over elements 4i..4i+3 of the unsigned weight bytes w times the
 * activations 256 xh + xl (32 each). */
LP_INLINE __m256i dot32v(__m256i w, __m256i h, __m256i l) {
#if defined(LP_VNNI)
    return _mm256_dpbusd_epi32(_mm256_slli_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), w, h), 8), w, l);
#elif defined(LP_AVXVNNI)
    return _mm256_dpbusd_avx_epi32(_mm256_slli_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w, h), 8), w, l);
#else
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(w, h), _mm256_set1_epi16(256)),
                            _mm256_madd_epi16(_mm256_maddubs_epi16(w, l), _mm256_set1_epi16(1)));
#endif
}

LP_INLINE __m256i dot32s(__m256i w, const int8_t *xh, const int8_t *xl) {
    return dot32v(w, _mm256_loadu_si256((const __m256i *)xh), _mm256_loadu_si256((const __m256i *)xl));
}

/* Of eight int32x8 v[0..8): u[0] = [sum of lanes 0-3 of v0, v1, v2, v3 | lanes 4-7 of v0..v3],
 * u[1] the same of v4..v7 (six horizontal adds). */
LP_INLINE __m256i pair_sums(__m256i a, __m256i b) { /* [a0+a2, b0+b2, a1+a3, b1+b3 | the same of 4..7] */
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
LP_INLINE __m256i quad_sums(__m256i p, __m256i q) { /* of pair_sums(v0, v1), pair_sums(v2, v3) */
    return _mm256_add_epi32(_mm256_unpacklo_epi64(p, q), _mm256_unpackhi_epi64(p, q));
}
LP_INLINE void sum_quads(const __m256i v[8], __m256i u[2]) {
    u[0] = quad_sums(pair_sums(v[0], v[1]), pair_sums(v[2], v[3]));
    u[1] = quad_sums(pair_sums(v[4], v[5]), pair_sums(v[6], v[7]));
}

/* [sum of v0, .., sum of v7]. */
LP_INLINE __m256i sum8x8(const __m256i v[8]) {
    __m256i u[2];
    sum_quads(v, u);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u[0], u[1], 0x20), _mm256_permute2x128_si256(u[0], u[1], 0x31));
}

LP_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}


/* nr (1 or 2) weight rows w0, w1 of Q4_K / Q5_K against row r: each activation load feeds both. */
LP_INLINE void k45_rows(const int type, const int nr, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr,
                        int64_t r, int64_t pf, float *y) {
    const int bb = type == LP_Q4_K ? 144 : 176;
    const int8_t *xh = xr->qh + r * xr->n_in, *xl = xr->ql + r * xr->n_in;
    const float *s = xr->s + r * nsb * 8, *sum32 = xr->sum32 + r * nsb * 8;
    __m256 a[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, am[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nsb; i++) {
        const int64_t k = 256 * i;
        __m256 sv[2];
        __m256i hb[2];
        const uint8_t *qs[2];
#pragma GCC unroll 2
        for (int t = 0; t < nr; t++) {
            const uint8_t *b = (t ? w1 : w0) + i * bb;
            prefetch_block(b, pf, bb);
            qs[t] = b + (type == LP_Q4_K ? 16 : 48);
            const __m128i sm = lp_k45_sc(b + 4);
            const __m128 dd = f16x2_ps(b); /* d, dmin */
            sv[t] = _mm256_mul_ps(_mm256_mul_ps(lp_u8x8(sm), _mm256_broadcastss_ps(dd)), _mm256_loadu_ps(s + 8 * i));
#if defined(LP_VNNI) || defined(LP_AVXVNNI)
            if (type == LP_Q4_K) sv[t] = _mm256_mul_ps(sv[t], _mm256_setr_ps(1, 0.0625f, 1, 0.0625f, 1, 0.0625f, 1, 0.0625f));
#endif
            am[t] = _mm256_fmadd_ps(_mm256_mul_ps(lp_u8x8(_mm_unpackhi_epi64(sm, sm)), _mm256_broadcastss_ps(_mm_movehdup_ps(dd))),
                                    _mm256_loadu_ps(sum32 + 8 * i), am[t]);
            hb[t] = type == LP_Q5_K ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
        }
        __m256i v[2][8];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int8_t *ph = xh + k + 64 * j, *pl = xl + k + 64 * j;
            const __m256i h0 = _mm256_loadu_si256((const __m256i *)ph), l0 = _mm256_loadu_si256((const __m256i *)pl);
            const __m256i h1 = _mm256_loadu_si256((const __m256i *)(ph + 32)), l1 = _mm256_loadu_si256((const __m256i *)(pl + 32));
#pragma GCC unroll 2
            for (int t = 0; t < nr; t++) {
                __m256i wa, wb;
#if defined(LP_VNNI) || defined(LP_AVXVNNI)
                if (type == LP_Q4_K) { /* the high nibbles in place: 16 q, 16 times the dot (vpdpbusd does not saturate) */
                    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs[t] + 32 * j));
                    wa = _mm256_and_si256(q, _mm256_set1_epi8(15));
                    wb = _mm256_and_si256(q, _mm256_set1_epi8((char)0xF0));
                } else
#endif
                    k45_pair(type, qs[t] + 32 * j, &hb[t], &wa, &wb);
                v[t][2 * j] = dot32v(wa, h0, l0);
                v[t][2 * j + 1] = dot32v(wb, h1, l1);
            }
        }
#pragma GCC unroll 2
        for (int t = 0; t < nr; t++) a[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8x8(v[t])), sv[t], a[t]);
    }
#pragma GCC unroll 2
    for (int t = 0; t < nr; t++) y[t] = hsum8(a[t]) - hsum8(am[t]);
}

float lp_row1_k45_split(int type, const uint8_t *row, int64_t nsb, const lp_xrows *xr, int64_t r, int64_t pf) {
    float y;
    if (type == LP_Q4_K) k45_rows(LP_Q4_K, 1, row, row, nsb, xr, r, pf, &y);
    else k45_rows(LP_Q5_K, 1, row, row, nsb, xr, r, pf, &y);
    return y;
}

void lp_row1x2_k45_split(int type, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr, int64_t r, int64_t pf,
                         float *y) {
    if (type == LP_Q4_K) k45_rows(LP_Q4_K, 2, w0, w1, nsb, xr, r, pf, y);
    else k45_rows(LP_Q5_K, 2, w0, w1, nsb, xr, r, pf, y);
}

/* Q6_K's super-block as q6k_half's bytes 0..63 against the split activations. */
LP_INLINE float q6k_rows(const uint8_t *row, int64_t nsb, const lp_xrows *xr, int64_t r, int64_t pf) {
    const int8_t *xh = xr->qh + r * xr->n_in, *xl = xr->ql + r * xr->n_in;
    const float *s = xr->s + r * nsb * 8;
    const int32_t *is16 = xr->isum16 + r * nsb * 16;
    /* group sums come as [groups 0 2 4 6 | 1 3 5 7] of blocks 0..3 (and of 4..7) */
    const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    const __m256i eo = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *b = row + i * 210;
        prefetch_block(b, pf, 210);
        const __m256 d = _mm256_set1_ps(lp_f16_to_f32(lp_rd16(b + 208)));
        const __m128i sc = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(b + 192)), even_odd);
        const __m256 ds = _mm256_mul_ps(d, _mm256_loadu_ps(s + 8 * i)); /* d s of blocks 0..7 */
        const __m256 sv0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), _mm256_permute2f128_ps(ds, ds, 0x00));
        const __m256 sv1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc, sc))),
                                         _mm256_permute2f128_ps(ds, ds, 0x11));
        const int64_t k = 256 * i;
        __m256i v[8];
        for (int n = 0; n < 2; n++) {
            __m256i w[4];
            q6k_half(b + 64 * n, b + 128 + 32 * n, w);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const int64_t o = k + 128 * n + 32 * j;
                v[4 * n + j] = dot32s(w[j], xh + o, xl + o);
            }
        }
        __m256i u[2];
        sum_quads(v, u);
        /* less 32 sum(xq) per group: the values are q - 32 */
        const __m256i o0 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(is16 + 16 * i)), eo);
        const __m256i o1 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(is16 + 16 * i + 8)), eo);
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(u[0], _mm256_slli_epi32(o0, 5))), sv0, a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(u[1], _mm256_slli_epi32(o1, 5))), sv1, a1);
    }
    return hsum8(_mm256_add_ps(a0, a1));
}

float lp_row1_q6_k_split(const uint8_t *row, int64_t nsb, const lp_xrows *xr, int64_t r, int64_t pf) {
    return q6k_rows(row, nsb, xr, r, pf);
}

#endif
