/* One activation row against one weight row, straight from the GGUF blocks (x86, 256-bit
 * vectors: AVX2, with AVX-VNNI's vpdpwssd at avx2+vnni, and the AVX-512 level with its VNNI
 * vpdpwssd on ymm registers): the decode ubatch of a single sequence, where the weights
 * stream from memory and every instruction per block counts.  The same integers and scales as dot.c's canonical path (lp.h): per block
 * of 32 the int16 dot of the weights' integers with the activations' int16, times d * s, plus
 * m * sum(x) where the type has a minimum; the fp32 sums are taken in another order.
 * Types without a path here (Q2_K, Q3_K, float types) return 0 and take the canonical path. */
#include "lp.h"

#if defined(LP_AVX2) || defined(LP_AVX512)

/* The int32x8 dot of 32 int16 weights (wl: elements 0..15, wh: 16..31) with 32 int16
 * activations (x0: 0..15, x1: 16..31). */
LP_INLINE __m256i dot32x(__m256i wl, __m256i wh, __m256i x0, __m256i x1) {
#if defined(LP_VNNI) || defined(LP_AVXVNNI)
    return lp_dpwssd256(lp_dpwssd256(_mm256_setzero_si256(), wl, x0), wh, x1);
#else
    return _mm256_add_epi32(_mm256_madd_epi16(wl, x0), _mm256_madd_epi16(wh, x1));
#endif
}

/* ... with the activations read from xq[0..32). */
LP_INLINE __m256i dot32(__m256i wl, __m256i wh, const int16_t *xq) {
    return dot32x(wl, wh, _mm256_loadu_si256((const __m256i *)xq), _mm256_loadu_si256((const __m256i *)(xq + 16)));
}

/* Bytes per block of a 32-element block type, and whether it has a minimum (Q4_0 counts: its
 * -8 is read as a minimum of -8 d, block16). */
LP_INLINE int bytes32(const int type) {
    return type == LP_Q4_0 ? 18 : type == LP_Q4_1 ? 20 : type == LP_Q5_0 ? 22 : type == LP_Q5_1 ? 24 : 34;
}
LP_INLINE int mins32(const int type) { return type == LP_Q4_0 || type == LP_Q4_1 || type == LP_Q5_1; }

LP_INLINE __m256i lo16(__m256i b) { return _mm256_cvtepi8_epi16(_mm256_castsi256_si128(b)); }
LP_INLINE __m256i hi16(__m256i b) { return _mm256_cvtepi8_epi16(_mm256_extracti128_si256(b, 1)); }

/* 32 bits -> 32 bytes, 0xFF where the bit is set (ggml's bytes_from_bits_32). */
LP_INLINE __m256i bits_to_bytes(const uint8_t *p) {
    uint32_t x32;
    memcpy(&x32, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* The 16 nibbles of qs as 32 bytes in element order: low nibbles 0..15, then high 16..31. */
LP_INLINE __m256i nibbles32(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

LP_INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The two f16 at p (a block's d and m, or d and dmin) as [p[0], p[1], 0, 0]: one F16C conversion. */
LP_INLINE __m128 f16x2_ps(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
}

/* 32-element block types: per block its int8 values (element order), d and m. */
LP_INLINE __m256i block32(const int type, const uint8_t *b, float *d, float *m) {
    *d = lp_f16_to_f32(lp_rd16(b));
    switch (type) {
    case LP_Q4_0:
        *m = 0.0f;
        return _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
    case LP_Q4_1:
        *m = lp_f16_to_f32(lp_rd16(b + 2));
        return nibbles32(b + 4);
    case LP_Q5_0:
        *m = 0.0f; /* (q | 0xF0) as int8 is q - 16 where the fifth bit is clear */
#if defined(LP_AVX512) /* the 32 fifth bits as a byte mask: one masked subtract, not ggml's four-step bytes_from_bits_32 */
        return _mm256_mask_sub_epi8(nibbles32(b + 6), (__mmask32)~lp_rd32(b + 2), nibbles32(b + 6), _mm256_set1_epi8(16));
#else
        return _mm256_or_si256(nibbles32(b + 6), _mm256_andnot_si256(bits_to_bytes(b + 2), _mm256_set1_epi8((char)0xF0)));
#endif
    case LP_Q5_1:
        *m = lp_f16_to_f32(lp_rd16(b + 2));
#if defined(LP_AVX512)
        return _mm256_mask_add_epi8(nibbles32(b + 8), (__mmask32)lp_rd32(b + 4), nibbles32(b + 8), _mm256_set1_epi8(16));
#else
        return _mm256_or_si256(nibbles32(b + 8), _mm256_and_si256(bits_to_bytes(b + 4), _mm256_set1_epi8(0x10)));
#endif
    default: /* LP_Q8_0 */
        *m = 0.0f;
        return _mm256_loadu_si256((const __m256i *)(b + 2));
    }
}

/* Block b of a 32-element type as int16 weights (wl: elements 0..15, wh: 16..31), d and the
 * minimum m: Q4_0 and Q4_1 keep their nibbles 0..15 (Q4_0's -8 becomes a minimum of -8 d),
 * Q5_0 / Q5_1 / Q8_0 their values (block32). */
LP_INLINE void block16(const int type, const uint8_t *bp, __m256i *wl, __m256i *wh, float *d, float *m) {
    if (type == LP_Q4_0 || type == LP_Q4_1) {
        const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(bp + (type == LP_Q4_0 ? 2 : 4))));
        *wl = _mm256_and_si256(w, _mm256_set1_epi16(15));
        *wh = _mm256_srli_epi16(w, 4);
        if (type == LP_Q4_1) { /* d and m in one conversion */
            const __m128 f = f16x2_ps(bp);
            *d = _mm_cvtss_f32(f);
            *m = _mm_cvtss_f32(_mm_movehdup_ps(f));
        } else {
            *d = lp_f16_to_f32(lp_rd16(bp));
            *m = -8.0f * *d;
        }
        return;
    }
#if defined(LP_AVX512)
    if (type == LP_Q5_0 || type == LP_Q5_1) { /* as Q4_x, the fifth bits applied per int16 lane by mask */
        const uint32_t qh = lp_rd32(bp + (type == LP_Q5_0 ? 2 : 4));
        const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(bp + (type == LP_Q5_0 ? 6 : 8))));
        const __m256i l = _mm256_and_si256(w, _mm256_set1_epi16(15)), h = _mm256_srli_epi16(w, 4), f = _mm256_set1_epi16(16);
        if (type == LP_Q5_0) { /* q - 16 where the bit is clear */
            *wl = _mm256_mask_sub_epi16(l, (__mmask16)~qh, l, f);
            *wh = _mm256_mask_sub_epi16(h, (__mmask16)(~qh >> 16), h, f);
            *d = lp_f16_to_f32(lp_rd16(bp));
            *m = 0.0f;
        } else { /* q + 16 where it is set */
            *wl = _mm256_mask_add_epi16(l, (__mmask16)qh, l, f);
            *wh = _mm256_mask_add_epi16(h, (__mmask16)(qh >> 16), h, f);
            const __m128 dm = f16x2_ps(bp);
            *d = _mm_cvtss_f32(dm);
            *m = _mm_cvtss_f32(_mm_movehdup_ps(dm));
        }
        return;
    }
#endif
    if (type == LP_Q8_0) { /* each half widened as it is loaded: one instruction each, where
                            * lo16 / hi16 of one 32-byte load took two loads and an extract
                            * (a 1-row call 10% faster in a Zen 4's cache) */
        *d = lp_f16_to_f32(lp_rd16(bp));
        *m = 0.0f;
        *wl = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bp + 2)));
        *wh = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bp + 18)));
        return;
    }
    const __m256i w8 = block32(type, bp, d, m);
    *wl = lo16(w8);
    *wh = hi16(w8);
}

/* Two horizontal sums at once: (sum a, sum b). */
LP_INLINE void hsum2(__m256 a, __m256 b, float *ya, float *yb) {
    const __m256 h = _mm256_hadd_ps(a, b); /* a01 a23 b01 b23 | a45 a67 b45 b67 */
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 t = _mm_hadd_ps(s, s); /* a, b, a, b */
    *ya = _mm_cvtss_f32(t);
    *yb = _mm_cvtss_f32(_mm_movehdup_ps(t));
}

/* [d s, m sum(x), 0, 0] of the block at bp of Q4_1 / Q5_1 (its first 4 bytes: the halves d and m)
 * and the activations' ss = [s, sum(x), 0, 0]: one F16C conversion and one product. */
LP_INLINE __m128 dm_ss(const uint8_t *bp, __m128 ss) { return _mm_mul_ps(f16x2_ps(bp), ss); }

/* nr (1 or 2) weight rows (w0, w1) of a 32-element block type against one activation row:
 * each activation load feeds both rows; per block the int16 dot and one FMA per row, plus the
 * minimum's m * sum(x) where the type has one (Q5_0, Q8_0: values signed, none).  Q4_1 and
 * Q5_1 keep their scales in vector registers (dm_ss: [d s, m sum(x)] in one product, d s
 * broadcast for the FMA, m sum(x) summed in lane 1): the same products and sums in the same
 * order as the scalar form (bit for bit), 6-12% faster a call on a Zen 4 at both x86 levels;
 * for Q4_0, Q5_0 and Q8_0, whose blocks hold d alone, the scalar form is the faster. */
LP_INLINE void rows_32(const int type, const int nr, const uint8_t *w0, const uint8_t *w1, int64_t nb,
                       const lp_xrows *xr, int64_t r, float *y) {
    const int bb = bytes32(type), mins = mins32(type), vec = type == LP_Q4_1 || type == LP_Q5_1;
    const int16_t *xq = xr->q + r * xr->n_in;
    const float *s = xr->s + r * nb, *sum = xr->sum32 + r * nb;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m128 m0v = _mm_setzero_ps(), m1v = _mm_setzero_ps();
    float m0s = 0.0f, m1s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        __m256i ul, uh, vl = _mm256_setzero_si256(), vh = vl;
        float d0, m0, d1 = 0.0f, m1 = 0.0f;
        block16(type, w0 + b * bb, &ul, &uh, &d0, &m0);
        if (nr == 2) block16(type, w1 + b * bb, &vl, &vh, &d1, &m1);
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq + 32 * b));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 32 * b + 16));
        const __m256 p0 = _mm256_cvtepi32_ps(dot32x(ul, uh, x0, x1));
        const __m256 p1 = nr == 2 ? _mm256_cvtepi32_ps(dot32x(vl, vh, x0, x1)) : _mm256_setzero_ps();
        if (vec) {
            const __m128 ss = _mm_unpacklo_ps(_mm_load_ss(s + b), _mm_load_ss(sum + b)); /* [s, sum(x), 0, 0] */
            const __m128 t0 = dm_ss(w0 + b * bb, ss);
            a0 = _mm256_fmadd_ps(p0, _mm256_broadcastss_ps(t0), a0);
            m0v = _mm_add_ps(m0v, t0);
            if (nr == 2) {
                const __m128 t1 = dm_ss(w1 + b * bb, ss);
                a1 = _mm256_fmadd_ps(p1, _mm256_broadcastss_ps(t1), a1);
                m1v = _mm_add_ps(m1v, t1);
            }
            continue;
        }
        const float sb = s[b];
        a0 = _mm256_fmadd_ps(p0, _mm256_set1_ps(d0 * sb), a0);
        if (nr == 2) a1 = _mm256_fmadd_ps(p1, _mm256_set1_ps(d1 * sb), a1);
        if (mins) {
            m0s += m0 * sum[b];
            m1s += m1 * sum[b];
        }
    }
    if (vec) {
        m0s = _mm_cvtss_f32(_mm_movehdup_ps(m0v));
        m1s = _mm_cvtss_f32(_mm_movehdup_ps(m1v));
    }
    if (nr == 2) {
        hsum2(a0, a1, y, y + 1);
        y[1] += m1s;
    } else {
        y[0] = hsum(a0);
    }
    y[0] += m0s;
}

/* One weight row of a 32-element block type against NX (2..4) activation rows r0..r0+NX-1:
 * each block decoded once, then per row rows_32's arithmetic (its int16 dot, one FMA, the
 * minimum's m * sum(x) in scalar), so a few rows cost little more than one. */
LP_INLINE void xrows_32(const int type, const int NX, const uint8_t *w, int64_t nb, const lp_xrows *xr, int64_t r0,
                        float *y) {
    const int bb = bytes32(type), mins = mins32(type);
    const int64_t n_in = xr->n_in;
    __m256 a[4];
    float ms[4];
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) a[i] = _mm256_setzero_ps(), ms[i] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        __m256i ul, uh;
        float d, m;
        block16(type, w + b * bb, &ul, &uh, &d, &m);
#pragma GCC unroll 4
        for (int i = 0; i < NX; i++) {
            const int64_t r = r0 + i;
            const __m256i p = dot32(ul, uh, xr->q + r * n_in + 32 * b);
            a[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * xr->s[r * nb + b]), a[i]);
            if (mins) ms[i] += m * xr->sum32[r * nb + b];
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NX; i++) y[i] = hsum(a[i]) + ms[i];
}

#define XROWS(T)                                                                                                       \
    switch (nx) {                                                                                                      \
    case 2: xrows_32(T, 2, row, n_in / 32, xr, r0, y); return 1;                                                      \
    case 3: xrows_32(T, 3, row, n_in / 32, xr, r0, y); return 1;                                                      \
    case 4: xrows_32(T, 4, row, n_in / 32, xr, r0, y); return 1;                                                      \
    default: return 0;                                                                                                 \
    }

int lp_dot_rows_x(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r0, int nx, float *y) {
    switch (type) {
    case LP_Q4_0: XROWS(LP_Q4_0)
    case LP_Q4_1: XROWS(LP_Q4_1)
    case LP_Q5_0: XROWS(LP_Q5_0)
    case LP_Q5_1: XROWS(LP_Q5_1)
    case LP_Q8_0: XROWS(LP_Q8_0)
    default: return 0;
    }
}
#undef XROWS

/* Q4_K / Q5_K: the 32 bytes of nibbles of sub-blocks 2j (wa: low nibbles) and 2j+1 (wb: high),
 * Q5_K's fifth bits from *hb (the 32 qh bytes, shifted right by 2 for the next pair). */
LP_INLINE void k45_pair(const int type, const uint8_t *qs, __m256i *hb, __m256i *wa, __m256i *wb) {
    const __m256i m4 = _mm256_set1_epi8(15), h16 = _mm256_set1_epi8(16);
    const __m256i q = _mm256_loadu_si256((const __m256i *)qs);
    *wa = _mm256_and_si256(q, m4);
    *wb = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (type == LP_Q5_K) {
        *wa = _mm256_or_si256(*wa, _mm256_and_si256(_mm256_slli_epi16(*hb, 4), h16));
        *wb = _mm256_or_si256(*wb, _mm256_and_si256(_mm256_slli_epi16(*hb, 3), h16));
        *hb = _mm256_srli_epi16(*hb, 2);
    }
}

/* Q6_K: one half (128 values) of a super-block from its 64 ql bytes and 32 qh bytes, as four
 * vectors of 32 values 0..63 (w[j]: elements 32 j .. 32 j + 31 of the half). */
LP_INLINE void q6k_half(const uint8_t *ql, const uint8_t *qh, __m256i *w) {
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    w[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
    w[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
    w[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
    w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
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

/* 32 int8 values (element order) as floats d * q (+ m): the first 16 with d0, m0, the rest
 * with d1, m1 (ggml's dequantization: the product rounded, then the minimum added). */
LP_INLINE void store32(__m256i w8, float d0, float d1, float m0, float m1, int has_min, float *out) {
    const __m128i lo = _mm256_castsi256_si128(w8), hi = _mm256_extracti128_si256(w8, 1);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int h = 0; h < 4; h++) {
        const __m256 d = _mm256_set1_ps(h < 2 ? d0 : d1);
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[h])), d);
        if (has_min) v = _mm256_add_ps(v, _mm256_set1_ps(h < 2 ? m0 : m1));
        _mm256_storeu_ps(out + 8 * h, v);
    }
}

LP_INLINE void f32_32(const int type, const uint8_t *row, int64_t nb, float *out) {
    const int bb = bytes32(type), has_min = type == LP_Q4_1 || type == LP_Q5_1; /* block32 keeps Q4_0's -8 */
    for (int64_t b = 0; b < nb; b++) {
        float d, m;
        const __m256i w = block32(type, row + b * bb, &d, &m);
        store32(w, d, d, m, m, has_min, out + 32 * b);
    }
}

/* Sub-blocks 2j and 2j + 1 of the Q4_K / Q5_K super-block at b (d, dmin: its two scales):
 * their 32 values each (Q5_K's fifth bits from *hb, moved on), scales d * sc and minimums
 * -(dmin * m), ggml's get_scale_min_k4 per pair. */
typedef struct {
    __m256i wa, wb;
    float da, db, mna, mnb;
} k45_sub;

LP_INLINE k45_sub k45_decode(const int type, const uint8_t *b, int j, float d, float dmin, __m256i *hb) {
    const uint8_t *sc = b + 4, *qs = b + (type == LP_Q4_K ? 16 : 48);
    const int sa = j < 2 ? sc[2 * j] & 63 : (sc[2 * j + 4] & 15) | ((sc[2 * j - 4] >> 6) << 4);
    const int ma = j < 2 ? sc[2 * j + 4] & 63 : (sc[2 * j + 4] >> 4) | ((sc[2 * j] >> 6) << 4);
    const int sb = j < 2 ? sc[2 * j + 1] & 63 : (sc[2 * j + 5] & 15) | ((sc[2 * j - 3] >> 6) << 4);
    const int mb = j < 2 ? sc[2 * j + 5] & 63 : (sc[2 * j + 5] >> 4) | ((sc[2 * j + 1] >> 6) << 4);
    k45_sub o;
    k45_pair(type, qs + 32 * j, hb, &o.wa, &o.wb);
    o.da = d * (float)sa, o.db = d * (float)sb, o.mna = -(dmin * (float)ma), o.mnb = -(dmin * (float)mb);
    return o;
}

/* The body (...) for each sub-block pair j of each super-block i of a Q4_K / Q5_K row, its k45_sub `sub`
 * (f32_k45 and unpack16_k45 store the same decoding two ways). */
#define FOR_K45(type, row, nsb, ...)                                                                                    \
    for (int64_t i = 0; i < (nsb); i++) {                                                                              \
        const uint8_t *b = (row) + i * ((type) == LP_Q4_K ? 144 : 176);                                                \
        const float d = lp_f16_to_f32(lp_rd16(b)), dmin = lp_f16_to_f32(lp_rd16(b + 2));                               \
        __m256i hb = (type) == LP_Q5_K ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();       \
        for (int j = 0; j < 4; j++) {                                                                                  \
            const k45_sub sub = k45_decode(type, b, j, d, dmin, &hb);                                                  \
            __VA_ARGS__                                                                                                \
        }                                                                                                              \
    }

LP_INLINE void f32_k45(const int type, const uint8_t *row, int64_t nsb, float *out) {
    FOR_K45(type, row, nsb, {
        store32(sub.wa, sub.da, sub.da, sub.mna, sub.mna, 1, out + 256 * i + 64 * j);
        store32(sub.wb, sub.db, sub.db, sub.mnb, sub.mnb, 1, out + 256 * i + 64 * j + 32);
    })
}

/* Half n of the Q6_K super-block at b: its four groups of 32 values, q - 32 (int8). */
LP_INLINE void q6k_values(const uint8_t *b, int n, __m256i *w) {
    q6k_half(b + 64 * n, b + 128 + 32 * n, w);
    for (int j = 0; j < 4; j++) w[j] = _mm256_sub_epi8(w[j], _mm256_set1_epi8(32));
}

/* The body (...) for each group of 32 values w[j] (q - 32) of a Q6_K row: k its first value's index,
 * d0 and d1 the scales of its two 16-groups (f32_q6_k and unpack16_q6_k store them two ways). */
#define FOR_Q6K(row, nsb, ...)                                                                                          \
    for (int64_t i = 0; i < (nsb); i++) {                                                                              \
        const uint8_t *b = (row) + i * 210;                                                                            \
        const int8_t *sc = (const int8_t *)(b + 192);                                                                  \
        const float d = lp_f16_to_f32(lp_rd16(b + 208));                                                               \
        for (int n = 0; n < 2; n++) {                                                                                  \
            __m256i w[4];                                                                                              \
            q6k_values(b, n, w);                                                                                       \
            for (int j = 0; j < 4; j++) {                                                                              \
                const int64_t k = 256 * i + 128 * n + 32 * j;                                                          \
                const float d0 = d * (float)sc[8 * n + 2 * j], d1 = d * (float)sc[8 * n + 2 * j + 1];                  \
                __VA_ARGS__                                                                                            \
            }                                                                                                          \
        }                                                                                                              \
    }

LP_INLINE void f32_q6_k(const uint8_t *row, int64_t nsb, float *out) {
    FOR_Q6K(row, nsb, { store32(w[j], d0, d1, 0.0f, 0.0f, 0, out + k); })
}

/* A row as float32 straight from its blocks (ggml's dequantization, bit for bit); 0 where the
 * type has no such path here. */
int lp_row_to_f32_fast(int type, const uint8_t *row, int64_t n_in, float *out) {
    switch (type) {
    case LP_Q4_0: f32_32(LP_Q4_0, row, n_in / 32, out); return 1;
    case LP_Q4_1: f32_32(LP_Q4_1, row, n_in / 32, out); return 1;
    case LP_Q5_0: f32_32(LP_Q5_0, row, n_in / 32, out); return 1;
    case LP_Q5_1: f32_32(LP_Q5_1, row, n_in / 32, out); return 1;
    case LP_Q8_0: f32_32(LP_Q8_0, row, n_in / 32, out); return 1;
    case LP_Q4_K: f32_k45(LP_Q4_K, row, n_in / 256, out); return 1;
    case LP_Q5_K: f32_k45(LP_Q5_K, row, n_in / 256, out); return 1;
    case LP_Q6_K: f32_q6_k(row, n_in / 256, out); return 1;
    default: return 0;
    }
}

/* A row as int16 values (the canonical q, lp.h) with d16 and m16, for the lane products
 * (lanes_x86.c): lp_unpack_row16 below; 0 for the types without a path here. */
LP_INLINE void store16(__m256i w8, int16_t *q16) { /* 32 int8 values as int16 */
    _mm256_storeu_si256((__m256i *)q16, lo16(w8));
    _mm256_storeu_si256((__m256i *)(q16 + 16), hi16(w8));
}

/* Q4_K / Q5_K (f32_k45's decoding) and Q6_K (f32_q6_k's) as int16 values, d16 and m16. */
LP_INLINE void unpack16_k45(const int type, const uint8_t *row, int64_t nsb, int16_t *q16, float *d16, float *m16) {
    FOR_K45(type, row, nsb, {
        const int64_t g = 16 * i + 4 * j; /* the 16-group of wa's first value */
        store16(sub.wa, q16 + 16 * g);
        store16(sub.wb, q16 + 16 * g + 32);
        d16[g] = d16[g + 1] = sub.da;
        d16[g + 2] = d16[g + 3] = sub.db;
        m16[g] = m16[g + 1] = sub.mna;
        m16[g + 2] = m16[g + 3] = sub.mnb;
    })
}
#undef FOR_K45

LP_INLINE void unpack16_q6_k(const uint8_t *row, int64_t nsb, int16_t *q16, float *d16, float *m16) {
    FOR_Q6K(row, nsb, {
        store16(w[j], q16 + k);
        d16[k / 16] = d0;
        d16[k / 16 + 1] = d1;
        m16[k / 16] = m16[k / 16 + 1] = 0.0f;
    })
}
#undef FOR_Q6K

/* Block bp of a 32-element type in canonical form (lp.h): block16's decoding, Q4_0's nibbles
 * (read with a minimum of -8 d) made q - 8 with no minimum. */
LP_INLINE void canon16(const int type, const uint8_t *bp, __m256i *wl, __m256i *wh, float *d, float *m) {
    block16(type, bp, wl, wh, d, m);
    if (type == LP_Q4_0) {
        *wl = _mm256_sub_epi16(*wl, _mm256_set1_epi16(8));
        *wh = _mm256_sub_epi16(*wh, _mm256_set1_epi16(8));
        *m = 0.0f;
    }
}

/* nb blocks of a 32-element type in canonical form, stored. */
LP_INLINE void unpack16_32(const int type, const uint8_t *row, int64_t nb, int16_t *q16, float *d16, float *m16) {
    const int bb = bytes32(type);
    for (int64_t b = 0; b < nb; b++) {
        __m256i wl, wh;
        float d, m;
        canon16(type, row + b * bb, &wl, &wh, &d, &m);
        _mm256_storeu_si256((__m256i *)(q16 + 32 * b), wl);
        _mm256_storeu_si256((__m256i *)(q16 + 32 * b + 16), wh);
        d16[2 * b] = d16[2 * b + 1] = d;
        m16[2 * b] = m16[2 * b + 1] = m;
    }
}

/* Each type its own loop: with the type a variable, every block took block16's branches (the
 * row's decoding is a third of an 8-row product's time; Q8_0 1.1-1.35x, Q5_0 1.1x, Q4_K 1.05x a
 * call at 8 and 16 rows on a Zen 4, `kernel_ab.py --rows 8`). */
int lp_unpack_row16(int type, const uint8_t *row, int64_t n_in, int16_t *q16, float *d16, float *m16) {
    switch (type) {
    case LP_Q4_K: unpack16_k45(LP_Q4_K, row, n_in / 256, q16, d16, m16); return 1;
    case LP_Q5_K: unpack16_k45(LP_Q5_K, row, n_in / 256, q16, d16, m16); return 1;
    case LP_Q6_K: unpack16_q6_k(row, n_in / 256, q16, d16, m16); return 1;
    case LP_Q4_0: unpack16_32(LP_Q4_0, row, n_in / 32, q16, d16, m16); return 1;
    case LP_Q4_1: unpack16_32(LP_Q4_1, row, n_in / 32, q16, d16, m16); return 1;
    case LP_Q5_0: unpack16_32(LP_Q5_0, row, n_in / 32, q16, d16, m16); return 1;
    case LP_Q5_1: unpack16_32(LP_Q5_1, row, n_in / 32, q16, d16, m16); return 1;
    case LP_Q8_0: unpack16_32(LP_Q8_0, row, n_in / 32, q16, d16, m16); return 1;
    default: return 0;
    }
}

#if defined(LP_AVX512)
/* Rows a and b of a 32-element type in the twin lanes' pair form (lanes_x86.c lp_twin_pair's ab
 * and dm), block by block: canon16's decoding of both, their pairs interleaved in registers;
 * the two int16 rows that lp_twin_pair reads back, and a third of the pairing's time, skipped. */
LP_INLINE void pair16_32(const int type, const uint8_t *ra, const uint8_t *rb, int64_t nb, int32_t *ab, float *dm) {
    const int bb = bytes32(type);
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    float *mm = dm + 4 * nb; /* the minima after the scales: 2 nb 16-groups, two rows each */
    for (int64_t b = 0; b < nb; b++) {
        __m256i al, ah, bl, bh;
        float da, ma, db, mb;
        canon16(type, ra + b * bb, &al, &ah, &da, &ma);
        canon16(type, rb + b * bb, &bl, &bh, &db, &mb);
        const __m512i va = _mm512_inserti64x4(_mm512_castsi256_si512(al), ah, 1);
        const __m512i vb = _mm512_inserti64x4(_mm512_castsi256_si512(bl), bh, 1);
        _mm512_storeu_si512(ab + 32 * b, _mm512_permutex2var_epi32(va, lo, vb));
        _mm512_storeu_si512(ab + 32 * b + 16, _mm512_permutex2var_epi32(va, hi, vb));
        dm[4 * b] = dm[4 * b + 2] = da, dm[4 * b + 1] = dm[4 * b + 3] = db;
        mm[4 * b] = mm[4 * b + 2] = ma, mm[4 * b + 1] = mm[4 * b + 3] = mb;
    }
}

int lp_unpack_pair16(int type, const uint8_t *a, const uint8_t *b, int64_t n_in, int32_t *ab, float *dm) {
    switch (type) {
    case LP_Q4_0: pair16_32(LP_Q4_0, a, b, n_in / 32, ab, dm); return 1;
    case LP_Q4_1: pair16_32(LP_Q4_1, a, b, n_in / 32, ab, dm); return 1;
    case LP_Q5_0: pair16_32(LP_Q5_0, a, b, n_in / 32, ab, dm); return 1;
    case LP_Q5_1: pair16_32(LP_Q5_1, a, b, n_in / 32, ab, dm); return 1;
    case LP_Q8_0: pair16_32(LP_Q8_0, a, b, n_in / 32, ab, dm); return 1;
    default: return 0;
    }
}
#endif

/* Weight rows w0 and w1 against activation row r, read together (each activation load feeds
 * both) where that pays: the 4- and 5-bit types.  Q8_0's rows are read one at a time: two
 * interleaved streams of its 34-byte blocks halve the bandwidth the prefetchers reach. */
int lp_dot_row1x2(int type, const uint8_t *w0, const uint8_t *w1, int64_t n_in, const lp_xrows *xr, int64_t r,
                  float *y) {
    switch (type) {
    case LP_Q4_0: rows_32(LP_Q4_0, 2, w0, w1, n_in / 32, xr, r, y); return 1;
    case LP_Q4_1: rows_32(LP_Q4_1, 2, w0, w1, n_in / 32, xr, r, y); return 1;
    case LP_Q5_0: rows_32(LP_Q5_0, 2, w0, w1, n_in / 32, xr, r, y); return 1;
    case LP_Q5_1: rows_32(LP_Q5_1, 2, w0, w1, n_in / 32, xr, r, y); return 1;
    default: return 0;
    }
}

int lp_dot_row1(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r, float *y) {
    switch (type) {
    case LP_Q4_0: rows_32(LP_Q4_0, 1, row, row, n_in / 32, xr, r, y); return 1;
    case LP_Q4_1: rows_32(LP_Q4_1, 1, row, row, n_in / 32, xr, r, y); return 1;
    case LP_Q5_0: rows_32(LP_Q5_0, 1, row, row, n_in / 32, xr, r, y); return 1;
    case LP_Q5_1: rows_32(LP_Q5_1, 1, row, row, n_in / 32, xr, r, y); return 1;
    case LP_Q8_0: rows_32(LP_Q8_0, 1, row, row, n_in / 32, xr, r, y); return 1;
    case LP_Q4_K: *y = row1_k45(LP_Q4_K, row, n_in / 256, xr, r); return 1;
    case LP_Q5_K: *y = row1_k45(LP_Q5_K, row, n_in / 256, xr, r); return 1;
    case LP_Q6_K: *y = row1_q6_k(row, n_in / 256, xr, r); return 1;
    default: return 0;
    }
}
#else
int lp_row_to_f32_fast(int type, const uint8_t *row, int64_t n_in, float *out) {
    (void)type, (void)row, (void)n_in, (void)out;
    return 0;
}

int lp_dot_row1x2(int type, const uint8_t *w0, const uint8_t *w1, int64_t n_in, const lp_xrows *xr, int64_t r,
                  float *y) {
    (void)type, (void)w0, (void)w1, (void)n_in, (void)xr, (void)r, (void)y;
    return 0;
}

int lp_dot_row1(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r, float *y) {
    (void)type, (void)row, (void)n_in, (void)xr, (void)r, (void)y;
    return 0;
}

int lp_dot_rows_x(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r0, int nx, float *y) {
    (void)type, (void)row, (void)n_in, (void)xr, (void)r0, (void)nx, (void)y;
    return 0;
}
#endif
