/* Weight rows straight from their blocks on x86 (256-bit vectors: AVX2 and the AVX-512 level),
 * for the products that read whole rows: as float32 (lp_row_to_f32_fast, ggml's dequantization
 * bit for bit: the fp32 tiles' rows, lp_dequant) and as int16 values with d16 and m16 (the
 * canonical form, quants.h, widened: the lanes' weight rows, lanes_x86.c), and at AVX-512 two
 * rows in the twin lanes' pair form.  The types without a path here (Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4, float types)
 * return 0 and take the canonical form. */
#include "blocks_x86.h"
#include "unpack_x86.h"

#if defined(LP_AVX2) || defined(LP_AVX512)

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
 * d0 and d1 the scales of its two 16-groups (f32_q6_k and unpack8_q6_k store them two ways). */
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

/* A row as int16 values (the canonical q, quants.h) with d16 and m16, for the lane products
 * (lanes_x86.c): lp_unpack_row16 below; 0 for the types without a path here. */
LP_INLINE void store16(__m256i w8, int16_t *q16) { /* 32 int8 values as int16 */
    _mm256_storeu_si256((__m256i *)q16, lo16(w8));
    _mm256_storeu_si256((__m256i *)(q16 + 16), hi16(w8));
}

/* The 8 sub-blocks' scales and minimums of the Q4_K / Q5_K super-block at b as d16 and m16 of its
 * 16 16-groups (each sub-block's twice): d * sc and -(dmin * m), k45_decode's floats, the 12
 * scale bytes unpacked in four 32-bit words (ggml's kmask1..3 rearrangement: the 8 scales in
 * bytes 0..7, the 8 minimums in 8..15) and converted 8 at a time; scalar, k45_decode's 6-bit
 * fields and float steps per pair took half of lp_unpack_row16's time (Llama 3.2 1B shape, B=16). */
LP_INLINE void k45_scales16(const uint8_t *b, float *d16, float *m16) {
    uint32_t u[4];
    memcpy(u, b + 4, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t m03 = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = m03;
    u[0] &= k1;
    const __m128i v = _mm_loadu_si128((const __m128i *)u);
    const __m256 d = _mm256_set1_ps(lp_f16_to_f32(lp_rd16(b))), dmin = _mm256_set1_ps(lp_f16_to_f32(lp_rd16(b + 2)));
    const __m256 sc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)));
    const __m256 mn = _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)))),
                                    _mm256_set1_ps(-0.0f));
    const __m256i lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    _mm256_storeu_ps(d16, _mm256_permutevar8x32_ps(sc, lo));
    _mm256_storeu_ps(d16 + 8, _mm256_permutevar8x32_ps(sc, hi));
    _mm256_storeu_ps(m16, _mm256_permutevar8x32_ps(mn, lo));
    _mm256_storeu_ps(m16 + 8, _mm256_permutevar8x32_ps(mn, hi));
}

/* Q4_K / Q5_K (f32_k45's decoding, the scales by k45_scales16) and Q6_K (f32_q6_k's) as int16
 * values, d16 and m16. */
LP_INLINE void unpack16_k45(const int type, const uint8_t *row, int64_t nsb, int16_t *q16, float *d16, float *m16) {
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *b = row + i * (type == LP_Q4_K ? 144 : 176), *qs = b + (type == LP_Q4_K ? 16 : 48);
        k45_scales16(b, d16 + 16 * i, m16 + 16 * i);
        __m256i hb = type == LP_Q5_K ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) { /* sub-blocks 2 j, 2 j + 1: 16-groups 4 j .. 4 j + 3 */
            __m256i wa, wb;
            k45_pair(type, qs + 32 * j, &hb, &wa, &wb);
            store16(wa, q16 + 256 * i + 64 * j);
            store16(wb, q16 + 256 * i + 64 * j + 32);
        }
    }
}

/* The same as bytes q + off (the int8 panels of q8mm_x86.c: no int16 row to narrow again). */
LP_INLINE void unpack8_k45(const int type, const uint8_t *row, int64_t nsb, int off, uint8_t *u8, float *d16, float *m16) {
    const __m256i o = _mm256_set1_epi8((char)off);
    FOR_K45(type, row, nsb, {
        const int64_t g = 16 * i + 4 * j;
        _mm256_storeu_si256((__m256i *)(u8 + 16 * g), _mm256_add_epi8(sub.wa, o));
        _mm256_storeu_si256((__m256i *)(u8 + 16 * g + 32), _mm256_add_epi8(sub.wb, o));
        d16[g] = d16[g + 1] = sub.da;
        d16[g + 2] = d16[g + 3] = sub.db;
        m16[g] = m16[g + 1] = sub.mna;
        m16[g + 2] = m16[g + 3] = sub.mnb;
    })
}
#undef FOR_K45

/* Q6_K as int16 (f32_q6_k's values): d16 of 16-group t of a super-block d * sc[t] (FOR_Q6K's d0,
 * d1), the 16 converted 8 at a time. */
LP_INLINE void unpack16_q6_k(const uint8_t *row, int64_t nsb, int16_t *q16, float *d16, float *m16) {
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *b = row + i * 210;
        const __m256 d = _mm256_set1_ps(lp_f16_to_f32(lp_rd16(b + 208)));
        const __m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
        _mm256_storeu_ps(d16 + 16 * i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
        _mm256_storeu_ps(d16 + 16 * i + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
        _mm256_storeu_ps(m16 + 16 * i, _mm256_setzero_ps());
        _mm256_storeu_ps(m16 + 16 * i + 8, _mm256_setzero_ps());
        for (int n = 0; n < 2; n++) {
            __m256i w[4];
            q6k_values(b, n, w);
            for (int j = 0; j < 4; j++) store16(w[j], q16 + 256 * i + 128 * n + 32 * j);
        }
    }
}

LP_INLINE void unpack8_q6_k(const uint8_t *row, int64_t nsb, int off, uint8_t *u8, float *d16, float *m16) {
    const __m256i o = _mm256_set1_epi8((char)off);
    FOR_Q6K(row, nsb, {
        _mm256_storeu_si256((__m256i *)(u8 + k), _mm256_add_epi8(w[j], o));
        d16[k / 16] = d0;
        d16[k / 16 + 1] = d1;
        m16[k / 16] = m16[k / 16 + 1] = 0.0f;
    })
}
#undef FOR_Q6K

int lp_unpack_row8(int type, const uint8_t *row, int64_t n_in, int off, uint8_t *u8, float *d16, float *m16) {
    switch (type) {
    case LP_Q4_K: unpack8_k45(LP_Q4_K, row, n_in / 256, off, u8, d16, m16); return 1;
    case LP_Q5_K: unpack8_k45(LP_Q5_K, row, n_in / 256, off, u8, d16, m16); return 1;
    case LP_Q6_K: unpack8_q6_k(row, n_in / 256, off, u8, d16, m16); return 1;
    default: return 0;
    }
}

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

#else
int lp_row_to_f32_fast(int type, const uint8_t *row, int64_t n_in, float *out) {
    (void)type, (void)row, (void)n_in, (void)out;
    return 0;
}
#endif
