/* Deterministic mode's one-row products of Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 at the AVX-512 level
 * (det8_row_x86.c dispatches here; det8_x86.h: the contract): 16 outputs a pass.  Per block of 32
 * two weight rows a zmm (the weights as unsigned bytes q + off; rows 0..3 and 8..11 in the low
 * 256 bits, each with row + 4 in the high: sum16), x's 32 int8 in both halves, one vpdpbusd zmm a
 * pair (8 for the 16 rows), the 16 rows' partials summed into one zmm in row order (a
 * transpose-add, exact), less off x the block's integer sum of q_x (exact), the 16 d's (and m's)
 * as one zmm (each row's first 4 bytes broadcast, then blended: heads16; one conversion), then the
 * float steps as vector operations across the outputs (a vector FMA is fmaf per lane), those of
 * det8_row_x86.c's row8:
 *   acc = fmaf((float)i, d_w * d_x, acc)    and with a minimum    acc = fmaf(sum_x, m_w, acc). */
#include "det16_row_x86.h"

#if defined(LP_AVX512)
/* acc + the 64 products u s, 4 to an int32 lane (exact; without VNNI for u <= 31: Q4 / Q5 only) */
LP_INLINE __m512i dpbusd512(__m512i acc, __m512i u, __m512i s) {
#if defined(LP_VNNI)
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

/* Block heads a (low 256 bits) and c (high) as lp_det8_bytes reads each: 32 unsigned bytes q + off
 * in element order. */
LP_INLINE __m512i pair_bytes(const int type, const uint8_t *a, const uint8_t *c) {
    if (type == LP_Q8_0) {
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + 2))),
                                             _mm256_loadu_si256((const __m256i *)(c + 2)), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    const int qo = type == LP_Q4_0 ? 2 : type == LP_Q4_1 ? 4 : type == LP_Q5_0 ? 6 : 8;
    __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(a + qo)));
    v = _mm512_mask_broadcast_i32x4(v, 0xFF00, _mm_loadu_si128((const __m128i *)(c + qo)));
    /* 128-bit lanes 1 and 3 (elements 16..31 of a row): the high nibbles */
    v = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), _mm512_set1_epi8(15));
    if (type == LP_Q5_0 || type == LP_Q5_1) { /* the fifth bits: bit i of a row's qh is its element i */
        const int ho = type == LP_Q5_0 ? 2 : 4;
        const __mmask64 k = (__mmask64)lp_rd32(a + ho) | (__mmask64)lp_rd32(c + ho) << 32;
        v = _mm512_mask_add_epi8(v, k, v, _mm512_set1_epi8(16));
    }
    return v;
}

/* The 16 rows' block sums in row order (exact): v[k] holds the partials of rows lo(k) (low 256
 * bits) and lo(k) + 4 (high), lo(k) = k + 4 (k / 4): v[0..3] rows 0..3 | 4..7, v[4..7] 8..11 | 12..15. */
LP_INLINE __m512i sum16(const __m512i v[8]) {
    __m512i a[4];
    for (int k = 0; k < 4; k++) { /* lanes by 128: v[2k] (0 + 2), v[2k + 1] (0 + 2), v[2k] (1 + 3), v[2k + 1] (1 + 3) */
        const __m512i e = v[2 * k], f = v[2 * k + 1];
        a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(e, f), _mm512_unpackhi_epi32(e, f));
    }
    /* by 128: v[0..3]'s sums over the lane (b0), v[4..7]'s (b1) */
    const __m512i b0 = _mm512_add_epi32(_mm512_unpacklo_epi64(a[0], a[1]), _mm512_unpackhi_epi64(a[0], a[1]));
    const __m512i b1 = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2], a[3]), _mm512_unpackhi_epi64(a[2], a[3]));
    /* 128-bit lanes 0 + 1 (the low rows), 2 + 3 (the high): b0 low, b1 low, b0 high, b1 high */
    return _mm512_add_epi32(_mm512_shuffle_i32x4(b0, b1, 0x88), _mm512_shuffle_i32x4(b0, b1, 0xDD));
}

/* lane l: the 4 bytes at rows[l] + at (d, then m or the next bytes): sum16's pairs each as one
 * broadcast (row lo(k) to lanes 0..3 and 8..11, lo(k) + 4 to 4..7 and 12..15), then a tree of blends
 * (lane l from pair l % 4 + 4 (l / 8)) */
LP_INLINE __m512i heads16(const uint8_t *const *rows, int64_t at) {
    __m512i h[8];
    for (int k = 0; k < 8; k++) {
        const int r = k + 4 * (k / 4);
        h[k] = _mm512_mask_broadcastd_epi32(_mm512_broadcastd_epi32(_mm_loadu_si32(rows[r] + at)), 0xF0F0,
                                            _mm_loadu_si32(rows[r + 4] + at));
    }
    for (int k = 0; k < 8; k += 2) h[k] = _mm512_mask_blend_epi32(0xAAAA, h[k], h[k + 1]);
    h[0] = _mm512_mask_blend_epi32(0xCCCC, h[0], h[2]), h[4] = _mm512_mask_blend_epi32(0xCCCC, h[4], h[6]);
    return _mm512_mask_blend_epi32(0xFF00, h[0], h[4]);
}

/* Outputs o0 .. o1 of n_out, 16 at a time (a last short group repeats its last row, not stored). */
LP_INLINE void row16(const int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                     int accumulate) {
    const int bb = bytes32(type), has_min = type == LP_Q4_1 || type == LP_Q5_1;
    const int off = type == LP_Q4_0 ? 8 : type == LP_Q5_0 ? 16 : type == LP_Q8_0 ? 128 : 0; /* lp_det8_offset */
    const int64_t nb = p->n_in / 32, rb = bb * nb;
    for (int64_t o = o0; o < o1; o += 16) {
        const uint8_t *rows[16];
        lp_det8_next nx;
        /* (the chunk after next prefetched: the weights streamed from memory arrive in time) */
        const int nw = lp_det8_rows_n(w, o, o1, n_out, rb, nb, 16, 2, rows, &nx);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            for (int64_t i = b * nx.per; i < (b + 1) * nx.per && i < nx.lines; i++) /* lp_det8_prefetch, into L1 */
                _mm_prefetch(nx.pf + 64 * i, _MM_HINT_T0);
            const int64_t at = bb * b;
            const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p->q + 32 * b)));
            __m512i ps[8];
            for (int k = 0; k < 8; k++) {
                const int r = k + 4 * (k / 4); /* sum16's lo(k) */
                ps[k] = dpbusd512(_mm512_setzero_si512(), pair_bytes(type, rows[r] + at, rows[r + 4] + at), xv);
            }
            __m512i is = sum16(ps);
            if (off) is = _mm512_sub_epi32(is, _mm512_set1_epi32(off * p->qs[b]));
            const __m512i hd = heads16(rows, at); /* d | m << 16 */
            const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw, _mm512_set1_ps(p->d[b])), acc);
            if (has_min) {
                const __m512 mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd, 16)));
                acc = _mm512_fmadd_ps(_mm512_set1_ps(p->sum[b]), mw, acc);
            }
        }
        const __mmask16 mk = (__mmask16)((1u << nw) - 1);
        float *yo = y + o;
        _mm512_mask_storeu_ps(yo, mk, accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(mk, yo), acc) : acc);
    }
}

void lp_det16_row(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                  int accumulate) {
    switch (type) {
    case LP_Q4_0: row16(LP_Q4_0, w, o0, o1, n_out, p, y, accumulate); break;
    case LP_Q4_1: row16(LP_Q4_1, w, o0, o1, n_out, p, y, accumulate); break;
    case LP_Q5_0: row16(LP_Q5_0, w, o0, o1, n_out, p, y, accumulate); break;
    case LP_Q5_1: row16(LP_Q5_1, w, o0, o1, n_out, p, y, accumulate); break;
    default: row16(LP_Q8_0, w, o0, o1, n_out, p, y, accumulate); break;
    }
}
#else
void lp_det16_row(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                  int accumulate) {
    (void)type, (void)w, (void)o0, (void)o1, (void)n_out, (void)p, (void)y, (void)accumulate;
}
#endif
