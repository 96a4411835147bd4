/* Deterministic mode's one-row products at the AVX2 level (AVX-512: det16_row_x86.c, 16 outputs a
 * pass, the same bits) with int8 activations (det8_x86.h:
 * the contract; det8_x86.c: two rows or more, the same bits).  8 outputs at once: per block of
 * 32 each output's 32 products one ymm vpdpbusd (the weights as unsigned bytes q + off, the
 * row's int8), the 8 outputs' partials summed into one vector (a transpose-add, exact), less
 * off x the block's integer sum of q_x (exact), then the float steps as vector operations across
 * the outputs (a vector FMA is fmaf per lane):
 *   acc = fmaf((float)i, d_w * d_x, acc)    and with a minimum    acc = fmaf(sum_x, m_w, acc). */
#include "det8_row_x86.h"
#include "det16_row_x86.h"

#if defined(LP_AVX512) || defined(LP_AVX2)
/* acc + the block's 32 products u s, 4 to an int32 lane (exact) */
LP_INLINE __m256i dpbusd256(__m256i acc, __m256i u, __m256i s) {
#if defined(LP_VNNI)
    return _mm256_dpbusd_epi32(acc, u, s);
#elif defined(LP_AVXVNNI)
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else /* exact for u <= 31 (Q8_0 without VNNI: signed, dpbssd256) */
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* the same for signed weights (LP_DET8_Q8_SIGNED): ggml's AVX2 |w| x sign(x, w), pairs <= 2 128 127 */
LP_INLINE __m256i dpbssd256(__m256i acc, __m256i w, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(s, w)), _mm256_set1_epi16(1)));
}

/* lane j: the sum of v[j]'s 8 int32 (exact) */
LP_INLINE __m256i sum8x8(const __m256i v[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    /* a: 128-bit half h holds v[0..3]'s sums over their half h; c: v[4..7]'s */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}

/* The 8 rows' block-b f16 at byte 'at' of their blocks (d: 0; Q4_1 / Q5_1's m: 2) as floats. */
LP_INLINE __m256 f16x8(const uint8_t *const *rows, int64_t at) {
    const __m128i h = _mm_setr_epi16((short)lp_rd16(rows[0] + at), (short)lp_rd16(rows[1] + at), (short)lp_rd16(rows[2] + at),
                                     (short)lp_rd16(rows[3] + at), (short)lp_rd16(rows[4] + at), (short)lp_rd16(rows[5] + at),
                                     (short)lp_rd16(rows[6] + at), (short)lp_rd16(rows[7] + at));
    return _mm256_cvtph_ps(h);
}

/* Outputs o0 .. o1 of n_out, 8 at a time (a last short group repeats its last row, not stored);
 * the next 8 rows' lines requested while these compute, spread over the blocks. */
LP_INLINE void row8(const int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                    int accumulate) {
    const int bb = bytes32(type), has_min = type == LP_Q4_1 || type == LP_Q5_1, off = lp_det8_offset(type);
    const int64_t nb = p->n_in / 32, rb = bb * nb;
    for (int64_t o = o0; o < o1; o += 8) {
        const uint8_t *rows[8];
        lp_det8_next nx;
        const int nw = lp_det8_rows8(w, o, o1, n_out, rb, nb, rows, &nx);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            lp_det8_prefetch(&nx, b);
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(p->q + 32 * b));
            __m256i ps[8];
            for (int j = 0; j < 8; j++) {
#if defined(LP_DET8_Q8_SIGNED)
                if (type == LP_Q8_0) {
                    ps[j] = dpbssd256(_mm256_setzero_si256(), lp_det8_bytes(type, rows[j] + bb * b), xv);
                    continue;
                }
#endif
                ps[j] = dpbusd256(_mm256_setzero_si256(), lp_det8_bytes(type, rows[j] + bb * b), xv);
            }
            __m256i is = sum8x8(ps);
            if (off) is = _mm256_sub_epi32(is, _mm256_set1_epi32(off * p->qs[b]));
            const __m256 dw = f16x8(rows, bb * b);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(p->d[b])), acc);
            if (has_min) acc = _mm256_fmadd_ps(_mm256_set1_ps(p->sum[b]), f16x8(rows, bb * b + 2), acc);
        }
        lp_det8_store8(y + o, acc, nw, accumulate);
    }
}

#if defined(LP_DET8_Q8_SIGNED) /* AVX2 without VNNI: Q4_0 / Q4_1 / Q5_0 / Q5_1 in row pairs (rowsn) */
/* the 16 bytes at a (low lane) and at c (high lane) */
LP_INLINE __m256i two16(const uint8_t *a, const uint8_t *c) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                   _mm_loadu_si128((const __m128i *)c), 1);
}

/* byte k of each lane: 0x10 where bit k % 8 of the lane's byte shuf[k] is set (ggml's bytes_from_bits_32) */
LP_INLINE __m256i fifth16(__m256i hdr, __m256i shuf) {
    const __m256i b = _mm256_or_si256(_mm256_shuffle_epi8(hdr, shuf), _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(16));
}

/* weight rows at a (low lane) and c (high lane), block heads: lo = their elements 0..15 as
 * lp_det8_bytes gives them, hi = 16..31; hd = the heads' first 16 bytes (d, m, qh) */
LP_INLINE void pair16(const int type, const uint8_t *a, const uint8_t *c, __m256i sl, __m256i sh, __m256i *lo, __m256i *hi,
                      __m256i *hd) {
    const int qo = bytes32(type) - 16;
    const __m256i v = two16(a + qo, c + qo), m4 = _mm256_set1_epi8(15);
    *hd = two16(a, c);
    *lo = _mm256_and_si256(v, m4), *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (type == LP_Q5_0 || type == LP_Q5_1) *lo = _mm256_or_si256(*lo, fifth16(*hd, sl)), *hi = _mm256_or_si256(*hi, fifth16(*hd, sh));
}

/* the 16 int8 at q in both lanes */
LP_INLINE __m256i bcast16(const int8_t *q) { return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q)); }

/* a pair's 8 partial sums (4 a lane) against x's halves xl, xh (each broadcast to both lanes);
 * exact: |u x + u x| <= 2 31 127 per maddubs, twice that fits int16 */
LP_INLINE __m256i pdot(__m256i lo, __m256i hi, __m256i xl, __m256i xh) {
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh)), _mm256_set1_epi16(1));
}

/* row8's walk for NX (1..4) activation rows, the same integers and float steps: weight rows k and
 * k + 4 in one vector's lanes (pair16), the row's 16-byte halves broadcast to both lanes, so that 3
 * hadds leave row j's exact block sum in lane j; the 8 rows' d (and m) from the block heads the pairs
 * load, 3 unpacks and a vpermq.  One row: each pair's products as it is decoded (few live registers). */
LP_INLINE void rowsn(const int type, const int NX, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out,
                     const lp_x8 *p, float *y, int64_t ldy, int accumulate) {
    const int bb = bytes32(type), has_min = type == LP_Q4_1 || type == LP_Q5_1;
    const int off = type == LP_Q4_0 ? 8 : type == LP_Q5_0 ? 16 : 0, ho = type == LP_Q5_0 ? 2 : 4; /* lp_det8_offset */
    const int64_t nb = p->n_in / 32, rb = bb * nb, r1 = 0x0101010101010101;
    const __m256i sl = _mm256_set_epi64x(r1 * (ho + 1), r1 * ho, r1 * (ho + 1), r1 * ho);
    const __m256i sh = _mm256_set_epi64x(r1 * (ho + 3), r1 * (ho + 2), r1 * (ho + 3), r1 * (ho + 2));
    for (int64_t o = o0; o < o1; o += 8) {
        const uint8_t *rows[8];
        lp_det8_next nx;
        const int nw = lp_det8_rows8(w, o, o1, n_out, rb, nb, rows, &nx);
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nb; b++) {
            lp_det8_prefetch(&nx, b);
            __m256i lo[4], hi[4], hd[4], ps[4];
            __m256i xl = _mm256_setzero_si256(), xh = xl;
            if (NX == 1) xl = bcast16(p->q + 32 * b), xh = bcast16(p->q + 32 * b + 16);
            for (int k = 0; k < 4; k++) {
                pair16(type, rows[k] + bb * b, rows[k + 4] + bb * b, sl, sh, &lo[k], &hi[k], &hd[k]);
                if (NX == 1) ps[k] = pdot(lo[k], hi[k], xl, xh);
            }
            /* lane h: words d(4h .. 4h+3), then the words at byte 2 (m) of the same rows */
            const __m256i t = _mm256_unpacklo_epi32(_mm256_unpacklo_epi16(hd[0], hd[1]), _mm256_unpacklo_epi16(hd[2], hd[3]));
            const __m256i dm = _mm256_permute4x64_epi64(t, 0xD8);
            const __m256 dw = _mm256_cvtph_ps(_mm256_castsi256_si128(dm));
            const __m256 mw = has_min ? _mm256_cvtph_ps(_mm256_extracti128_si256(dm, 1)) : _mm256_setzero_ps();
            for (int i = 0; i < NX; i++) {
                if (NX > 1) {
                    xl = bcast16(p->q + i * p->n_in + 32 * b), xh = bcast16(p->q + i * p->n_in + 32 * b + 16);
                    for (int k = 0; k < 4; k++) ps[k] = pdot(lo[k], hi[k], xl, xh);
                }
                __m256i is = _mm256_hadd_epi32(_mm256_hadd_epi32(ps[0], ps[1]), _mm256_hadd_epi32(ps[2], ps[3]));
                if (off) is = _mm256_sub_epi32(is, _mm256_set1_epi32(off * p->qs[i * nb + b]));
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(p->d[i * nb + b])), acc[i]);
                if (has_min) acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(p->sum[i * nb + b]), mw, acc[i]);
            }
        }
        for (int i = 0; i < NX; i++) lp_det8_store8(y + i * ldy + o, acc[i], nw, accumulate);
    }
}
#else
/* row8's walk for NX (2..4) activation rows: each block of 8 weight rows decoded once, then per row the
 * same integers and float steps as row8's (the same bits as each row alone). */
LP_INLINE void rowsn(const int type, const int NX, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p,
                     float *y, int64_t ldy, int accumulate) {
    const int bb = bytes32(type), has_min = type == LP_Q4_1 || type == LP_Q5_1, off = lp_det8_offset(type);
    const int64_t nb = p->n_in / 32, rb = bb * nb;
    for (int64_t o = o0; o < o1; o += 8) {
        const uint8_t *rows[8];
        lp_det8_next nx;
        const int nw = lp_det8_rows8(w, o, o1, n_out, rb, nb, rows, &nx);
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nb; b++) {
            lp_det8_prefetch(&nx, b);
            __m256i wb[8];
            for (int j = 0; j < 8; j++) wb[j] = lp_det8_bytes(type, rows[j] + bb * b);
            const __m256 dw = f16x8(rows, bb * b), mw = has_min ? f16x8(rows, bb * b + 2) : _mm256_setzero_ps();
            for (int i = 0; i < NX; i++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(p->q + i * p->n_in + 32 * b));
                __m256i ps[8];
                for (int j = 0; j < 8; j++) ps[j] = dpbusd256(_mm256_setzero_si256(), wb[j], xv);
                __m256i is = sum8x8(ps);
                if (off) is = _mm256_sub_epi32(is, _mm256_set1_epi32(off * p->qs[i * nb + b]));
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(p->d[i * nb + b])), acc[i]);
                if (has_min) acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(p->sum[i * nb + b]), mw, acc[i]);
            }
        }
        for (int i = 0; i < NX; i++) lp_det8_store8(y + i * ldy + o, acc[i], nw, accumulate);
    }
}

#endif

#define ROWSN(T)                                                                                                       \
    do {                                                                                                               \
        if (nx == 2) rowsn(T, 2, w, o0, o1, n_out, p, y, ldy, accumulate);                                             \
        else if (nx == 3) rowsn(T, 3, w, o0, o1, n_out, p, y, ldy, accumulate);                                        \
        else rowsn(T, 4, w, o0, o1, n_out, p, y, ldy, accumulate);                                                     \
    } while (0)

void lp_det8_rows(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, int nx, float *y,
                  int64_t ldy, int accumulate) {
    switch (type) {
    case LP_Q4_0: ROWSN(LP_Q4_0); break;
    case LP_Q4_1: ROWSN(LP_Q4_1); break;
    case LP_Q5_0: ROWSN(LP_Q5_0); break;
    default: ROWSN(LP_Q5_1); break;
    }
}
#undef ROWSN

void lp_det8_row(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                 int accumulate) {
#if defined(LP_AVX512) /* 16 rows a pass on zmm (det16_row_x86.c), the same bits; row8: AVX2 */
    lp_det16_row(type, w, o0, o1, n_out, p, y, accumulate);
#else
    switch (type) {
#if defined(LP_DET8_Q8_SIGNED)
    case LP_Q4_0: rowsn(LP_Q4_0, 1, w, o0, o1, n_out, p, y, 0, accumulate); break;
    case LP_Q4_1: rowsn(LP_Q4_1, 1, w, o0, o1, n_out, p, y, 0, accumulate); break;
    case LP_Q5_0: rowsn(LP_Q5_0, 1, w, o0, o1, n_out, p, y, 0, accumulate); break;
    case LP_Q5_1: rowsn(LP_Q5_1, 1, w, o0, o1, n_out, p, y, 0, accumulate); break;
#else
    case LP_Q4_0: row8(LP_Q4_0, w, o0, o1, n_out, p, y, accumulate); break;
    case LP_Q4_1: row8(LP_Q4_1, w, o0, o1, n_out, p, y, accumulate); break;
    case LP_Q5_0: row8(LP_Q5_0, w, o0, o1, n_out, p, y, accumulate); break;
    case LP_Q5_1: row8(LP_Q5_1, w, o0, o1, n_out, p, y, accumulate); break;
#endif
    default: row8(LP_Q8_0, w, o0, o1, n_out, p, y, accumulate); break;
    }
#endif
}
#else
void lp_det8_row(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                 int accumulate) {
    (void)type, (void)w, (void)o0, (void)o1, (void)n_out, (void)p, (void)y, (void)accumulate;
}
void lp_det8_rows(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, int nx, float *y,
                  int64_t ldy, int accumulate) {
    (void)type, (void)w, (void)o0, (void)o1, (void)n_out, (void)p, (void)nx, (void)y, (void)ldy, (void)accumulate;
}
#endif
