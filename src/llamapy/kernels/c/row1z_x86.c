/* The 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against one to four int16
 * activation rows (x86): a block's 32 weights widened to int16 -- at the AVX-512 level one zmm,
 * its dot with the row's 32 int16 in one vpmaddwd; at AVX2 two ymm (lp_dot32x: vpdpwssd with
 * AVX-VNNI) -- and the block's d * s in one FMA.  One activation row reads four weight rows a
 * pass, each with its own accumulator, so no FMA chain waits on itself (the 256-bit form before
 * took two rows a pass on one accumulator each: 7 cycles a Q8_0 block on a Zen 5, Gemma 3's
 * 262144 x 640 output product compute-bound at 20 GB/s on one thread); the four rows' d
 * gathered in a general register, one conversion.  The same integers, scales and minimums as
 * lp.h's canonical products (Q4_0 as q - 8 with no minimum: the same integer sum); the fp32 sums
 * in another order.  Two to four activation rows (lp_row1z_rows): each row's sums in the same
 * order as alone, so a row's bits do not depend on how many rows share the weights
 * (tests/test_row1z.py). */
#include "row1z_x86.h"

#if defined(LP_AVX512) || defined(LP_AVX2)
#include "blocks_x86.h"

#if defined(LP_AVX512)
typedef __m512 vz;   /* a block's 16 pair products as floats, an accumulator */
typedef __m512i wz;  /* a block's 32 weights as int16 */
#define VZ_ZERO _mm512_setzero_ps
#define VZ_FMA _mm512_fmadd_ps
#define VZ_SET1 _mm512_set1_ps

/* Block bp of a 32-element type as 32 int16 (element order); its d (and Q4_1 / Q5_1's m) are
 * read by halves_z.  Q4_0's values as q - 8, with no minimum: the same integer sum as
 * row1_x86.c's q with its minimum of -8 d.  (sh: per lane, the first 16 shifted by 0, the last
 * 16 by 4: the high nibbles.) */
LP_INLINE wz block_z(const int type, const uint8_t *bp) {
    if (type == LP_Q8_0) return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(bp + 2)));
    const __m512i sh = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const int off = type == LP_Q4_0 ? 2 : type == LP_Q4_1 ? 4 : type == LP_Q5_0 ? 6 : 8;
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(bp + off))));
    const __m512i w = _mm512_and_si512(_mm512_srlv_epi16(b, sh), _mm512_set1_epi16(15)); /* nibbles 0..15, then 16..31 */
    if (type == LP_Q4_0) return _mm512_sub_epi16(w, _mm512_set1_epi16(8));
    if (type == LP_Q5_0) /* q - 16 where the fifth bit is clear */
        return _mm512_mask_sub_epi16(w, (__mmask32)~lp_rd32(bp + 2), w, _mm512_set1_epi16(16));
    if (type == LP_Q5_1) /* q + 16 where it is set */
        return _mm512_mask_add_epi16(w, (__mmask32)lp_rd32(bp + 4), w, _mm512_set1_epi16(16));
    return w;
}

/* The pair products of a block's int16 weights and activations, as 16 floats. */
LP_INLINE vz dot_z(wz w, const int16_t *xq) {
    return _mm512_cvtepi32_ps(_mm512_madd_epi16(w, _mm512_loadu_si512((const void *)xq)));
}

/* v's 16 lanes summed to 8: the 256-bit halves added. */
LP_INLINE __m256 half_z(vz v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
#else
typedef __m256 vz;
typedef struct {
    __m256i l, h; /* elements 0..15, 16..31 */
} wz;
#define VZ_ZERO _mm256_setzero_ps
#define VZ_FMA _mm256_fmadd_ps
#define VZ_SET1 _mm256_set1_ps

/* As the AVX-512 block_z, in two halves (blocks_x86.h block16; Q4_0 as q - 8). */
LP_INLINE wz block_z(const int type, const uint8_t *bp) {
    wz w;
    float d, m;
    block16(type, bp, &w.l, &w.h, &d, &m);
    if (type == LP_Q4_0) w.l = _mm256_sub_epi16(w.l, _mm256_set1_epi16(8)), w.h = _mm256_sub_epi16(w.h, _mm256_set1_epi16(8));
    return w;
}

/* The pair products of a block, as 8 floats (lp_dot32x: vpdpwssd with AVX-VNNI). */
LP_INLINE vz dot_z(wz w, const int16_t *xq) {
    return _mm256_cvtepi32_ps(lp_dot32x(w.l, w.h, _mm256_loadu_si256((const __m256i *)xq),
                                        _mm256_loadu_si256((const __m256i *)(xq + 16))));
}

LP_INLINE __m256 half_z(vz v) { return v; }
#endif

/* The f16 at byte off of rows w[0..n) as floats in lanes 0..n-1: the halves gathered in a
 * general register, one conversion. */
LP_INLINE __m128 halves_z(const int n, const uint8_t *const *w, int64_t off) {
    uint64_t u = 0;
#pragma GCC unroll 4
    for (int j = 0; j < n; j++) u |= (uint64_t)lp_rd16(w[j] + off) << (16 * j);
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)u));
}

/* lane 0..3: the sums of a, b, c, d, each reduced by the same tree (AVX-512: the 256-bit
 * halves added; then adjacent pairs), so a vector's sum does not depend on the vectors beside it. */
LP_INLINE __m128 reduce4(vz a, vz b, vz c, vz d) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(half_z(a), half_z(b)), _mm256_hadd_ps(half_z(c), half_z(d)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)); /* (h: a0123 b0123 c0123 d0123 | 4567) */
}

/* NW weight rows (1 or 4: w[0..NW)) against NX activation rows (NX 1 where NW > 1, else
 * 1..4) r0.. of xr: y[j * NX + i] = row j . row r0 + i.  Per (row, row) pair one accumulator,
 * the blocks in order, each block's d * s (and m * sum(x)) one lane of a vector product (d of
 * the NW rows times s, or d times the NX rows' s); reduced by reduce4, the minimums' sum added:
 * a pair's bits the same whatever NW and NX. */
LP_INLINE void rows_z(const int type, const int NW, const int NX, const uint8_t *const *w, int64_t nb,
                      const lp_xrows *xr, int64_t r0, int64_t pf, float *y) {
    const int bb = bytes32(type), mins = type == LP_Q4_1 || type == LP_Q5_1;
    const int64_t n_in = xr->n_in;
    const float *s = xr->s + r0 * nb, *sum = xr->sum32 + r0 * nb;
    vz a[4] = {VZ_ZERO(), VZ_ZERO(), VZ_ZERO(), VZ_ZERO()};
    __m128 mv = _mm_setzero_ps(); /* lane k: pair k's minimums */
    for (int64_t b = 0; b < nb; b++) {
        float sc[4] __attribute__((aligned(16)));
        const int64_t o = b * bb;
        if (NW > 1) { /* lane j: row j's d times s */
            _mm_store_ps(sc, _mm_mul_ps(halves_z(NW, w, o), _mm_set1_ps(s[b])));
            if (mins) mv = _mm_fmadd_ps(halves_z(NW, w, o + 2), _mm_set1_ps(sum[b]), mv);
        } else { /* lane i: d times row i's s */
            __m128 sv = _mm_load_ss(s + b), uv = _mm_load_ss(sum + b);
#pragma GCC unroll 4
            for (int i = 1; i < NX; i++) {
                sv = _mm_insert_ps(sv, _mm_load_ss(s + i * nb + b), i << 4);
                uv = _mm_insert_ps(uv, _mm_load_ss(sum + i * nb + b), i << 4);
            }
            _mm_store_ps(sc, _mm_mul_ps(_mm_set1_ps(_mm_cvtss_f32(halves_z(1, w, o))), sv));
            if (mins) mv = _mm_fmadd_ps(_mm_set1_ps(_mm_cvtss_f32(halves_z(1, w, o + 2))), uv, mv);
        }
#pragma GCC unroll 4
        for (int j = 0; j < NW; j++) {
            if (pf) LP_PREFETCH_W(w[j] + o + pf + bb - 1); /* (every line holds a block's last byte) */
            const wz wj = block_z(type, w[j] + o);
#pragma GCC unroll 4
            for (int i = 0; i < NX; i++) {
                const int k = j + i; /* (NW or NX is 1) */
                a[k] = VZ_FMA(dot_z(wj, xr->q + (r0 + i) * n_in + 32 * b), VZ_SET1(sc[k]), a[k]);
            }
        }
    }
    const int n = NW * NX;
    const __m128 t = _mm_add_ps(reduce4(a[0], a[n > 1], a[n > 2 ? 2 : 0], a[n > 3 ? 3 : 0]), mins ? mv : _mm_setzero_ps());
    float out[4];
    _mm_storeu_ps(out, t);
#pragma GCC unroll 4
    for (int k = 0; k < n; k++) y[k] = out[k];
}

#define LP_Z_TYPES(NW, NX)                                                                                             \
    switch (type) {                                                                                                    \
    case LP_Q4_0: rows_z(LP_Q4_0, NW, NX, w, nb, xr, r0, pf, y); return 1;                                             \
    case LP_Q4_1: rows_z(LP_Q4_1, NW, NX, w, nb, xr, r0, pf, y); return 1;                                             \
    case LP_Q5_0: rows_z(LP_Q5_0, NW, NX, w, nb, xr, r0, pf, y); return 1;                                             \
    case LP_Q5_1: rows_z(LP_Q5_1, NW, NX, w, nb, xr, r0, pf, y); return 1;                                             \
    case LP_Q8_0: rows_z(LP_Q8_0, NW, NX, w, nb, xr, r0, pf, y); return 1;                                             \
    default: return 0;                                                                                                 \
    }

int lp_row1z_covers(int type) {
    return type == LP_Q4_0 || type == LP_Q4_1 || type == LP_Q5_0 || type == LP_Q5_1 || type == LP_Q8_0;
}

int lp_row1z(int type, int nw, const uint8_t *w0, int64_t rb, int64_t n_in, const lp_xrows *xr, int64_t r, int64_t pf,
             float *y) {
    const uint8_t *w[4] = {w0, w0 + rb, w0 + 2 * rb, w0 + 3 * rb};
    const int64_t nb = n_in / 32, r0 = r;
    if (nw == 4) LP_Z_TYPES(4, 1)
    LP_Z_TYPES(1, 1)
}

int lp_row1z_rows(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r0, int nx, float *y) {
    const uint8_t *w[4] = {row, row, row, row};
    const int64_t nb = n_in / 32, pf = 0;
    switch (nx) {
    case 2: LP_Z_TYPES(1, 2)
    case 3: LP_Z_TYPES(1, 3)
    case 4: LP_Z_TYPES(1, 4)
    default: return 0;
    }
}
#undef LP_Z_TYPES

#else
int lp_row1z_covers(int type) { return (void)type, 0; }

int lp_row1z(int type, int nw, const uint8_t *w0, int64_t rb, int64_t n_in, const lp_xrows *xr, int64_t r, int64_t pf,
             float *y) {
    (void)type, (void)nw, (void)w0, (void)rb, (void)n_in, (void)xr, (void)r, (void)pf, (void)y;
    return 0;
}

int lp_row1z_rows(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r0, int nx, float *y) {
    (void)type, (void)row, (void)n_in, (void)xr, (void)r0, (void)nx, (void)y;
    return 0;
}
#endif
