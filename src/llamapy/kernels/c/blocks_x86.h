/* x86's decoding of the 32-element block types and of the K-quants' values on 256-bit vectors
 * (AVX2, and the AVX-512 level on ymm registers): the always-inlined steps that row1_x86.c (the
 * one-row products) and unpack_x86.c (rows as float32 and int16) share, inlined into each. */
#ifndef LP_BLOCKS_X86_H
#define LP_BLOCKS_X86_H

#include "lp.h"

#if defined(LP_AVX2) || defined(LP_AVX512)

/* Bytes per block of a 32-element block type. */
LP_INLINE int bytes32(const int type) {
    return type == LP_Q4_0 ? 18 : type == LP_Q4_1 ? 20 : type == LP_Q5_0 ? 22 : type == LP_Q5_1 ? 24 : 34;
}

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
 * vectors of 32 values 0..63 (w[j]: elements 32 j .. 32 j + 31 of the half).  Each vector's
 * two high bits moved to bits 4-5 of its byte in one shift and a mask (16-bit shifts: the bits
 * crossing into the other byte are masked off): 17 instructions a half, where shifting them
 * down to bits 0-1 first took 21. */
LP_INLINE void q6k_half(const uint8_t *ql, const uint8_t *qh, __m256i *w) {
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    w[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
    w[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
    w[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30));
    w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
}


/* The 8 scales (bytes 0..7) and 8 minimums (8..15) of a Q4_K / Q5_K super-block, 6 bits each,
 * from its 12 packed bytes b[0..12) at sc (ggml's get_scale_min_k4 for all eight at once), in
 * one vector: [b0..3 & 63, b8..11 & 15 | (b0..3 >> 6) << 4, b4..7 & 63, b8..11 >> 4 | (b4..7 >> 6) << 4]
 * (16 bytes read: the block goes on past its scales). */
LP_INLINE __m128i lp_k45_sc(const uint8_t *sc) {
    const __m128i b = _mm_loadu_si128((const __m128i *)sc);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi8(b, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)),
                                                    _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi8(b, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)), 2),
                                     _mm_set1_epi8(0x30));
    return _mm_or_si128(lo, hi);
}

/* The weight lines of bytes b + pf .. b + pf + n - 1 (pf 0: none), requested while block b
 * computes: the prefetch spread over a row's blocks, not a burst of a row's lines before it
 * (lp_row1_prefetches). */
LP_INLINE void prefetch_block(const uint8_t *b, int64_t pf, int n) {
    if (!pf) return;
    for (const char *p = (const char *)(((uintptr_t)(b + pf)) & ~(uintptr_t)63), *e = (const char *)(b + pf + n); p < e; p += 64)
        LP_PREFETCH_W(p);
}

LP_INLINE __m256 lp_u8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
/* The int32x8 dot of 32 int16 weights (wl: elements 0..15, wh: 16..31) with 32 int16
 * activations (x0: 0..15, x1: 16..31). */
LP_INLINE __m256i lp_dot32x(__m256i wl, __m256i wh, __m256i x0, __m256i x1) {
#if defined(LP_VNNI) || defined(LP_AVXVNNI)
    return lp_dpwssd256(lp_dpwssd256(_mm256_setzero_si256(), wl, x0), wh, x1);
#else
    return _mm256_add_epi32(_mm256_madd_epi16(wl, x0), _mm256_madd_epi16(wh, x1));
#endif
}

#endif

#endif
