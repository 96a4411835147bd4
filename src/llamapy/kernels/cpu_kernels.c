/* llamapy's CPU kernels: what no library does for GGUF weights on the CPU, for the few-row
 * ubatches of decode (batched or not), where PyTorch's per-op overhead and its int4 kernel's
 * layout dominate.  Built once per machine by llamapy/kernels/build.py (gcc -O3
 * -march=native -fopenmp), loaded with ctypes; every function works on contiguous,
 * row-major buffers the caller allocated.  OpenMP here shares PyTorch's runtime (the same
 * libgomp.so.1 is already loaded), so the two never fight for the cores.
 *
 * Weights stay in the GGUF file's own blocks (ggml's block_q4_0 / block_q4_1 / block_q8_0):
 * resident bytes are the file's bytes.  Products are exact fp32: each block is expanded to
 * 32 floats in registers (q * d + m, the same arithmetic as dequantization) and multiplied
 * by fp32 activations; llama.cpp instead rounds activations to 8 bits (Q8_0 / Q8_1).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#if defined(__AVX512BF16__)
#define LP_BF16 1 /* few-row products take bf16 dot products (the activations rounded once) */
#else
#define LP_BF16 0
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define LP_I16 1 /* one-row products take int16 activations (vpdpwssd), see quantize_x_i16 */
#else
#define LP_I16 0
#endif

enum { LP_Q4_0 = 2, LP_Q4_1 = 3, LP_Q8_0 = 8 }; /* GGMLQuantizationType values */

int lp_abi_version(void) { return 3; }

/* 0: the portable loops; else 512 (AVX-512 intrinsics) + 4 with BF16 dot products (the
 * few-row products) + 1 with VNNI (the one-row products on int16 activations). */
int lp_simd(void) {
#if defined(__AVX512F__)
    return 512 + 4 * LP_BF16 + LP_I16;
#else
    return 0;
#endif
}

static inline float f16_to_f32(uint16_t h) {
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even (no NaNs occur here) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static int64_t block_bytes(int type) {
    switch (type) {
    case LP_Q4_0: return 18;
    case LP_Q4_1: return 20;
    case LP_Q8_0: return 34;
    default: return 0;
    }
}

/* One block (32 weights) as floats: w[j] = its dequantized value (ggml's formulas). */
static inline void block_to_f32(int type, const uint8_t *b, float *w) {
    const float d = f16_to_f32((uint16_t)(b[0] | (b[1] << 8)));
    if (type == LP_Q8_0) {
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++) w[j] = q[j] * d;
        return;
    }
    const float m = type == LP_Q4_1 ? f16_to_f32((uint16_t)(b[2] | (b[3] << 8))) : 0.0f;
    const uint8_t *qs = b + (type == LP_Q4_1 ? 4 : 2);
    const int off = type == LP_Q4_0 ? 8 : 0;
    for (int j = 0; j < 16; j++) {
        if (type == LP_Q4_1) {
            w[j] = (qs[j] & 15) * d + m;
            w[j + 16] = (qs[j] >> 4) * d + m;
        } else {
            w[j] = ((qs[j] & 15) - off) * d;
            w[j + 16] = ((qs[j] >> 4) - off) * d;
        }
    }
}

/* Rows r0..r1 of a block matrix [n_out, n_in] as float [r1 - r0, n_in]. */
void lp_dequant(int type, const uint8_t *w, int64_t n_in, int64_t r0, int64_t r1, float *out) {
    const int64_t nb = n_in / 32, bb = block_bytes(type);
#pragma omp parallel for schedule(static)
    for (int64_t r = r0; r < r1; r++)
        for (int64_t b = 0; b < nb; b++) block_to_f32(type, w + (r * nb + b) * bb, out + (r - r0) * n_in + b * 32);
}

/* The same rows rounded to bfloat16 (round to nearest even; no NaNs occur in weights). */
void lp_dequant_bf16(int type, const uint8_t *w, int64_t n_in, int64_t r0, int64_t r1, uint16_t *out) {
    const int64_t nb = n_in / 32, bb = block_bytes(type);
#pragma omp parallel for schedule(static)
    for (int64_t r = r0; r < r1; r++) {
        float t[32];
        for (int64_t b = 0; b < nb; b++) {
            block_to_f32(type, w + (r * nb + b) * bb, t);
            uint16_t *o = out + (r - r0) * n_in + b * 32;
            for (int j = 0; j < 32; j++) o[j] = f32_to_bf16(t[j]);
        }
    }
}

/* Rows ids[0..n) as float [n, n_in] (ggml_get_rows: the token embeddings). */
void lp_get_rows(int type, const uint8_t *w, int64_t n_in, const int64_t *ids, int64_t n, float *out) {
    const int64_t nb = n_in / 32, bb = block_bytes(type);
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < nb; b++) block_to_f32(type, w + (ids[i] * nb + b) * bb, out + i * n_in + b * 32);
}

#if defined(__AVX512F__)
/* One block as two vectors of 16 floats: lo = weights 0..15, hi = weights 16..31.  4-bit
 * types: a 16-entry table of the block's values (d * q + m for q = 0..15, one FMA) read by
 * vpermps with the nibbles as indices, so no int-to-float conversions occupy the FMA pipes. */
static inline __attribute__((always_inline)) void block_to_vec(int type, const uint8_t *b, __m512 *lo, __m512 *hi) {
    int32_t dm;
    memcpy(&dm, b, 4);
    const __m128 s = _mm_cvtph_ps(_mm_cvtsi32_si128(dm)); /* d, and m for Q4_1 */
    const __m512 d = _mm512_broadcastss_ps(s);
    if (type == LP_Q8_0) {
        *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)))), d);
        *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18)))), d);
        return;
    }
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const int q41 = type == LP_Q4_1;
    const __m512 tab = q41 ? _mm512_fmadd_ps(iota, d, _mm512_broadcastss_ps(_mm_movehdup_ps(s)))
                           : _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(8.0f)), d);
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + (q41 ? 4 : 2))));
    *lo = _mm512_permutexvar_ps(q, tab); /* vpermps reads the low 4 bits of each index */
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), tab);
}

/* One activation row against one output row, exact fp32 (each block's weights as floats,
 * by block_to_vec).  Four accumulators keep the FMA chains from bounding the loop. */
static inline __attribute__((always_inline)) float mm_row1(const int type, const uint8_t *row, int64_t nb, int64_t bb,
                                                           const float *x) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512 lo, hi, lo2, hi2;
        block_to_vec(type, row + b * bb, &lo, &hi);
        block_to_vec(type, row + (b + 1) * bb, &lo2, &hi2);
        a0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + b * 32), a0);
        a1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + b * 32 + 16), a1);
        a2 = _mm512_fmadd_ps(lo2, _mm512_loadu_ps(x + b * 32 + 32), a2);
        a3 = _mm512_fmadd_ps(hi2, _mm512_loadu_ps(x + b * 32 + 48), a3);
    }
    if (b < nb) {
        __m512 lo, hi;
        block_to_vec(type, row + b * bb, &lo, &hi);
        a0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + b * 32), a0);
        a1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + b * 32 + 16), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
#endif

/* One activation row prepared for the int16 product (mm_row1_i16), per pair of blocks bp
 * (blocks 2bp, 2bp+1; a missing last block is zeros):
 *   q   int16 [64]: x_2bp[0:16], x_2bp+1[0:16], x_2bp[16:32], x_2bp+1[16:32], each x / sx
 *   sx  float [16]: the two blocks' scales, 8 lanes each (sx = max |x| / 32767 over the block)
 *   xs  float [16]: the two blocks' sums of x (fp32), divided by 8, 8 lanes each
 * so an element's rounding error is at most max |x| / 65534 of its block (bf16's is 1/256
 * of the element). */
typedef struct {
    int16_t *q;
    float *sx, *xs;
} lp_xi16;

static int64_t xi16_bytes(int64_t n_in) { return (n_in / 32 + 1) / 2 * (64 * 2 + 32 * 4); }

static lp_xi16 xi16_at(void *buf, int64_t n_in) {
    const int64_t nbp = (n_in / 32 + 1) / 2;
    lp_xi16 r = {(int16_t *)buf, (float *)((char *)buf + nbp * 128), (float *)((char *)buf + nbp * 128 + nbp * 64)};
    return r;
}

static void quantize_x_i16(const float *x, int64_t n_in, lp_xi16 xq) {
    const int64_t nb = n_in / 32, nbp = (nb + 1) / 2;
    for (int64_t b = 0; b < 2 * nbp; b++) {
        const int64_t bp = b / 2, hb = b % 2;
        float mx = 0.0f, sum = 0.0f;
        if (b < nb)
            for (int j = 0; j < 32; j++) {
                mx = fabsf(x[b * 32 + j]) > mx ? fabsf(x[b * 32 + j]) : mx;
                sum += x[b * 32 + j];
            }
        const float sc = mx / 32767.0f, inv = mx > 0.0f ? 32767.0f / mx : 0.0f;
        for (int j = 0; j < 16; j++) {
            long lo = b < nb ? lrintf(x[b * 32 + j] * inv) : 0, hi = b < nb ? lrintf(x[b * 32 + 16 + j] * inv) : 0;
            xq.q[bp * 64 + hb * 16 + j] = (int16_t)(lo > 32767 ? 32767 : lo < -32767 ? -32767 : lo);
            xq.q[bp * 64 + 32 + hb * 16 + j] = (int16_t)(hi > 32767 ? 32767 : hi < -32767 ? -32767 : hi);
        }
        for (int j = 0; j < 8; j++) {
            xq.sx[bp * 16 + hb * 8 + j] = sc;
            xq.xs[bp * 16 + hb * 8 + j] = sum * 0.125f;
        }
    }
}

#if LP_I16
/* Blocks 2bp, 2bp+1 (b1 may repeat b0 where the row has an odd number of blocks: x is zero
 * there) into the accumulators: acc += (q . xq) * d * sx, accm += m * sum(x) / 8 per lane. */
static inline __attribute__((always_inline)) void pair_i16(const int type, const uint8_t *b0, const uint8_t *b1,
                                                           const int16_t *q, const float *sx, const float *xs,
                                                           __m512 *acc, __m512 *accm) {
    const __m512i idx_d = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    int32_t t0, t1;
    memcpy(&t0, b0, 4);
    memcpy(&t1, b1, 4);
    const __m512 s = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_unpacklo_epi32(_mm_cvtsi32_si128(t0), _mm_cvtsi32_si128(t1))));
    const __m512 dv = _mm512_permutexvar_ps(idx_d, s); /* d0 x8, d1 x8 */
    __m512i lo, hi;
    if (type == LP_Q8_0) {
        lo = _mm512_cvtepi8_epi16(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + 2))),
                                                          _mm_loadu_si128((const __m128i *)(b1 + 2)), 1));
        hi = _mm512_cvtepi8_epi16(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + 18))),
                                                          _mm_loadu_si128((const __m128i *)(b1 + 18)), 1));
    } else {
        const int64_t o = type == LP_Q4_1 ? 4 : 2;
        const __m512i w = _mm512_cvtepu8_epi16(_mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + o))), _mm_loadu_si128((const __m128i *)(b1 + o)), 1));
        lo = _mm512_and_si512(w, _mm512_set1_epi16(15));
        hi = _mm512_srli_epi16(w, 4);
    }
    __m512i p = _mm512_dpwssd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(q));
    p = _mm512_dpwssd_epi32(p, hi, _mm512_loadu_si512(q + 32));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dv, _mm512_loadu_ps(sx)), *acc);
    if (type != LP_Q8_0) { /* w = d q + m: m sum(x); Q4_0's w = d (q - 8): m = -8 d */
        const __m512i idx_m = _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
        const __m512 mv = type == LP_Q4_1 ? _mm512_permutexvar_ps(idx_m, s) : _mm512_mul_ps(dv, _mm512_set1_ps(-8.0f));
        *accm = _mm512_fmadd_ps(mv, _mm512_loadu_ps(xs), *accm);
    }
}

/* One output row against one int16-prepared activation row: per pair of blocks, the 32 + 32
 * weights as int16 (nibbles, or Q8_0's bytes) in the order of lp_xi16.q, two vpdpwssd into
 * 16 int32 lanes (8 per block), then scaled by d * sx per lane; Q4_1's m (and Q4_0's -8 d)
 * multiplies the block's sum of x. */
static inline __attribute__((always_inline)) float mm_row1_i16(const int type, const uint8_t *row, int64_t nb,
                                                               int64_t bb, lp_xi16 xq) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, m0 = a0, m1 = a0;
    int64_t bp = 0;
    for (; 2 * bp + 4 <= nb; bp += 2) { /* two pairs per step: two accumulator chains */
        const uint8_t *b = row + 2 * bp * bb;
        pair_i16(type, b, b + bb, xq.q + bp * 64, xq.sx + bp * 16, xq.xs + bp * 16, &a0, &m0);
        pair_i16(type, b + 2 * bb, b + 3 * bb, xq.q + bp * 64 + 64, xq.sx + bp * 16 + 16, xq.xs + bp * 16 + 16, &a1, &m1);
    }
    for (; 2 * bp < nb; bp++) {
        const uint8_t *b = row + 2 * bp * bb;
        pair_i16(type, b, 2 * bp + 1 < nb ? b + bb : b, xq.q + bp * 64, xq.sx + bp * 16, xq.xs + bp * 16, &a0, &m0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(m0, m1)));
}
#endif

#if defined(__AVX512BF16__)
/* RT activation rows (bf16, row stride n_in) against one output row: the block is expanded
 * once to 32 bf16 weights and multiplied by every row (vdpbf16ps: 32 products per
 * instruction, fp32 accumulation).  The weights and activations are bf16-rounded. */
static inline __attribute__((always_inline)) void mm_rows_bf16(const int type, const uint8_t *wrow, int64_t nb, int64_t bb,
                                                               const uint16_t *xb, int64_t n_in, int rt, float *acc) {
    __m512 a[16];
    for (int r = 0; r < 16; r++) a[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512 lo, hi;
        block_to_vec(type, wrow + b * bb, &lo, &hi);
        const __m512bh wv = _mm512_cvtne2ps_pbh(hi, lo);
        const uint16_t *xc = xb + b * 32;
        if (rt == 16) {
            for (int r = 0; r < 16; r++) a[r] = _mm512_dpbf16_ps(a[r], wv, (__m512bh)_mm512_loadu_si512(xc + r * n_in));
        } else {
            for (int r = 0; r < 16; r++)
                if (r < rt) a[r] = _mm512_dpbf16_ps(a[r], wv, (__m512bh)_mm512_loadu_si512(xc + r * n_in));
        }
    }
    for (int r = 0; r < 16; r++)
        if (r < rt) acc[r] = _mm512_reduce_add_ps(a[r]);
}
#endif

#if defined(__AVX512BF16__)
/* Two output rows against 8 activation rows: each x load feeds two products (16
 * accumulators), halving the loads per product of mm_rows_bf16. */
static inline __attribute__((always_inline)) void mm_rows2x8_bf16(const int type, const uint8_t *w0, const uint8_t *w1,
                                                                  int64_t nb, int64_t bb, const uint16_t *xb,
                                                                  int64_t n_in, float *acc0, float *acc1) {
    __m512 a[8], c[8];
    for (int r = 0; r < 8; r++) a[r] = c[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512 lo, hi, lo1, hi1;
        block_to_vec(type, w0 + b * bb, &lo, &hi);
        block_to_vec(type, w1 + b * bb, &lo1, &hi1);
        const __m512bh u = _mm512_cvtne2ps_pbh(hi, lo), u1 = _mm512_cvtne2ps_pbh(hi1, lo1);
        const uint16_t *xc = xb + b * 32;
        for (int r = 0; r < 8; r++) {
            const __m512bh xv = (__m512bh)_mm512_loadu_si512(xc + r * n_in);
            a[r] = _mm512_dpbf16_ps(a[r], u, xv);
            c[r] = _mm512_dpbf16_ps(c[r], u1, xv);
        }
    }
    for (int r = 0; r < 8; r++) {
        acc0[r] = _mm512_reduce_add_ps(a[r]);
        acc1[r] = _mm512_reduce_add_ps(c[r]);
    }
}
#endif

/* Portable: output row o against rows r0..r0+nr of x (fp32, auto-vectorized loops). */
static void mm_generic(int type, const uint8_t *wrow, int64_t nb, int64_t bb, const float *x, int64_t n_in, int nr,
                       float *acc) {
    float wv[32];
    for (int r = 0; r < nr; r++) acc[r] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        block_to_f32(type, wrow + b * bb, wv);
        for (int r = 0; r < nr; r++) {
            const float *xr = x + r * n_in + b * 32;
            float s = 0.0f;
            for (int j = 0; j < 32; j++) s += wv[j] * xr[j];
            acc[r] += s;
        }
    }
}

static inline void put(float *y, float v, int accumulate) { *y = accumulate ? *y + v : v; }

/* Output rows o0..o1 of the product (see lp_mm); `type` is a constant in each instance. */
static inline __attribute__((always_inline)) void mm_chunk(const int type, const uint8_t *w, int64_t o0, int64_t o1,
                                                           int64_t n_in, const float *x, const uint16_t *xb,
                                                           const lp_xi16 *xq, int64_t n_rows, float *y, int64_t ldy,
                                                           int accumulate) {
    const int64_t nb = n_in / 32, bb = block_bytes(type);
    float acc[16];
#if LP_I16
    if (n_rows == 1 && xq) {
        for (int64_t o = o0; o < o1; o++) put(y + o, mm_row1_i16(type, w + o * nb * bb, nb, bb, *xq), accumulate);
        return;
    }
#else
    (void)xq;
#endif
#if defined(__AVX512F__)
    if (n_rows == 1) {
        for (int64_t o = o0; o < o1; o++) put(y + o, mm_row1(type, w + o * nb * bb, nb, bb, x), accumulate);
        return;
    }
#endif
    (void)xb;
    int64_t r0 = 0;
#if defined(__AVX512BF16__)
    for (; r0 + 8 <= n_rows; r0 += 8) { /* full tiles of 8 rows, output rows in pairs */
        int64_t o = o0;
        for (; o + 2 <= o1; o += 2) {
            float acc1[8];
            mm_rows2x8_bf16(type, w + o * nb * bb, w + (o + 1) * nb * bb, nb, bb, xb + r0 * n_in, n_in, acc, acc1);
            for (int r = 0; r < 8; r++) {
                put(y + (r0 + r) * ldy + o, acc[r], accumulate);
                put(y + (r0 + r) * ldy + o + 1, acc1[r], accumulate);
            }
        }
        for (; o < o1; o++) {
            mm_rows_bf16(type, w + o * nb * bb, nb, bb, xb + r0 * n_in, n_in, 8, acc);
            for (int r = 0; r < 8; r++) put(y + (r0 + r) * ldy + o, acc[r], accumulate);
        }
    }
#endif
    for (; r0 < n_rows; r0 += 16) {
        const int nr = (int)(n_rows - r0 < 16 ? n_rows - r0 : 16);
        for (int64_t o = o0; o < o1; o++) {
#if defined(__AVX512BF16__)
            mm_rows_bf16(type, w + o * nb * bb, nb, bb, xb + r0 * n_in, n_in, nr, acc);
#else
            mm_generic(type, w + o * nb * bb, nb, bb, x + r0 * n_in, n_in, nr, acc);
#endif
            for (int r = 0; r < nr; r++) put(y + (r0 + r) * ldy + o, acc[r], accumulate);
        }
    }
}

/* x [n] float as bfloat16 (round to nearest even), split among the threads of the
 * enclosing parallel region (serial outside one). */
static void to_bf16_for(const float *x, int64_t n, uint16_t *out) {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = f32_to_bf16(x[i]);
}

/* The product of lp_mm, its output chunks split among the threads of the enclosing parallel
 * region (an orphaned `omp for`: lp_mm runs it in its own region, lp_llama_layers in the
 * region of the whole forward).  xb: x as bf16, needed when n_rows > 1 and LP_BF16; xq: the
 * one row as int16 (quantize_x_i16), needed when n_rows == 1 and LP_I16 (NULL: exact fp32). */
static void mm_for(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, const uint16_t *xb,
                   const lp_xi16 *xq, int64_t n_rows, float *y, int64_t ldy, int accumulate) {
    const int64_t chunk = 16;
#pragma omp for schedule(static)
    for (int64_t o0 = 0; o0 < n_out; o0 += chunk) {
        const int64_t o1 = o0 + chunk < n_out ? o0 + chunk : n_out;
        switch (type) { /* one specialized instance per block type */
        case LP_Q4_0: mm_chunk(LP_Q4_0, w, o0, o1, n_in, x, xb, xq, n_rows, y, ldy, accumulate); break;
        case LP_Q4_1: mm_chunk(LP_Q4_1, w, o0, o1, n_in, x, xb, xq, n_rows, y, ldy, accumulate); break;
        case LP_Q8_0: mm_chunk(LP_Q8_0, w, o0, o1, n_in, x, xb, xq, n_rows, y, ldy, accumulate); break;
        }
    }
}

/* y[r, o] (+)= sum_k x[r, k] W[o, k]: x float [n_rows, n_in], W blocks [n_out, n_in], y float
 * rows of stride ldy.  Output rows are split among the threads in chunks of 16; each chunk's
 * weights are read once per 16 activation rows.  One row: exact fp32 products.  Several rows
 * (with AVX512-BF16): bf16 products, fp32 sums. */
/* The activations of a product in the form its kernel reads (inside a parallel region, the
 * threads meeting after it): one row as int16 into xq (when given), several as bf16 into xb
 * (when given); else nothing (fp32 as they are).  Returns the xq to pass to mm_for. */
static const lp_xi16 *prep_x(const float *x, int64_t n_rows, int64_t n_in, uint16_t *xb, const lp_xi16 *xq) {
    if (n_rows == 1 && xq) {
#pragma omp single
        quantize_x_i16(x, n_in, *xq);
        return xq;
    }
    if (n_rows > 1 && xb) to_bf16_for(x, n_rows * n_in, xb);
    return NULL;
}

void lp_mm(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
           int64_t ldy, int accumulate) {
    uint16_t *xb = n_rows > 1 && LP_BF16 ? (uint16_t *)malloc((size_t)(n_rows * n_in) * 2) : NULL;
    void *qbuf = n_rows == 1 && LP_I16 ? malloc((size_t)xi16_bytes(n_in)) : NULL;
    const lp_xi16 xq = xi16_at(qbuf, n_in);
#pragma omp parallel
    {
        const lp_xi16 *q = prep_x(x, n_rows, n_in, xb, qbuf ? &xq : NULL);
        mm_for(type, w, n_out, n_in, x, xb, q, n_rows, y, ldy, accumulate);
    }
    free(xb);
    free(qbuf);
}

/* out = x / sqrt(mean(x^2) + eps) * w for one row of n (ggml_rms_norm then ggml_mul); w may
 * be NULL. */
static void rms_norm_row(const float *x, const float *w, int64_t n, float eps, float *out) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    const float s = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = w ? x[i] * s * w[i] : x[i] * s;
}

/* out[i] = silu(g[i]) * u[i] over one row of n_ff. */
static void swiglu_row(const float *g, const float *u, int64_t n_ff, float *out) {
#pragma omp simd
    for (int64_t i = 0; i < n_ff; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* rms_norm_row over rows [n_rows, n]. */
void lp_rms_norm(const float *x, const float *w, int64_t n_rows, int64_t n, float eps, float *out) {
#pragma omp parallel for schedule(static) if (n_rows * n >= 8192)
    for (int64_t r = 0; r < n_rows; r++) rms_norm_row(x + r * n, w, n, eps, out + r * n);
}

/* out[r, i] = silu(gu[r, i]) * gu[r, n_ff + i]: gate | up stacked in one row of 2 n_ff. */
void lp_swiglu(const float *gu, int64_t n_rows, int64_t n_ff, float *out) {
#pragma omp parallel for schedule(static) if (n_rows * n_ff >= 8192)
    for (int64_t r = 0; r < n_rows; r++) swiglu_row(gu + r * 2 * n_ff, gu + r * 2 * n_ff + n_ff, n_ff, out + r * n_ff);
}

/* RoPE in place on the n_head heads of one row, head h at x + h * d; c, s [n_rot/2].  neox:
 * pairs (i, i + n_rot/2), else (2i, 2i+1); dims past n_rot are left alone. */
static void rope_row(float *x, int64_t n_head, int64_t d, int64_t n_rot, const float *c, const float *s, int neox) {
    const int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_head; h++) {
        float *v = x + h * d;
        for (int64_t i = 0; i < half; i++) {
            const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c[i] - x1 * s[i];
            v[b] = x0 * s[i] + x1 * c[i];
        }
    }
}

/* rope_row on each row of x [n_rows, row stride ldx]; cos, sin [n_rows, n_rot/2]. */
void lp_rope(float *x, int64_t n_rows, int64_t ldx, int64_t n_head, int64_t d, int64_t n_rot, const float *cos_,
             const float *sin_, int neox) {
    for (int64_t r = 0; r < n_rows; r++) rope_row(x + r * ldx, n_head, d, n_rot, cos_ + r * (n_rot / 2), sin_ + r * (n_rot / 2), neox);
}

/* dot of a float vector with an f16 one, and y += p * f16 vector, over d elements. */
static inline float dot_f16(const float *q, const uint16_t *k, int64_t d) {
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= d; j += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + j), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + j))), acc);
    float s = _mm512_reduce_add_ps(acc);
#else
    float s = 0.0f;
    int64_t j = 0;
#endif
    for (; j < d; j++) s += q[j] * f16_to_f32(k[j]);
    return s;
}

static inline void axpy_f16(float *y, float p, const uint16_t *v, int64_t d) {
    int64_t j = 0;
#if defined(__AVX512F__)
    const __m512 vp = _mm512_set1_ps(p);
    for (; j + 16 <= d; j += 16)
        _mm512_storeu_ps(y + j, _mm512_fmadd_ps(vp, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + j))),
                                                _mm512_loadu_ps(y + j)));
#endif
    for (; j < d; j++) y[j] += p * f16_to_f32(v[j]);
}

#if defined(__AVX512F__)
/* The common small-head case (d_k = d_v = 64, up to 4 query heads per KV head), one row's
 * KV head: each cell's K and V rows are converted from f16 once for all r heads, and the r
 * outputs stay in registers through the V pass.  p: scratch [r * nc]. */
static void attn_group_d64(const float *q0, int64_t r, const uint16_t *k, const uint16_t *v, int64_t ldk,
                           int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p,
                           float *o0) {
    __m512 qv[4][4], acc[4][4];
    float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, l[4] = {0, 0, 0, 0};
    for (int64_t h = 0; h < r; h++)
        for (int j = 0; j < 4; j++) qv[h][j] = _mm512_loadu_ps(q0 + h * 64 + 16 * j);
    for (int64_t c = 0; c < nc; c++) {
        const uint16_t *kr = k + cells[c] * ldk;
        __m512 kv[4];
        for (int j = 0; j < 4; j++) kv[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + 16 * j)));
        for (int64_t h = 0; h < r; h++) {
            __m512 t = _mm512_mul_ps(qv[h][0], kv[0]);
            for (int j = 1; j < 4; j++) t = _mm512_fmadd_ps(qv[h][j], kv[j], t);
            const float sc = _mm512_reduce_add_ps(t) * scale + mi[cells[c]];
            p[h * nc + c] = sc;
            mx[h] = sc > mx[h] ? sc : mx[h];
        }
    }
    for (int64_t h = 0; h < r; h++) {
        float *ph = p + h * nc, m = mx[h], s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < nc; c++) {
            ph[c] = m == -INFINITY ? 0.0f : expf(ph[c] - m);
            s += ph[c];
        }
        l[h] = s;
        for (int j = 0; j < 4; j++) acc[h][j] = _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < nc; c++) {
        const uint16_t *vr = v + cells[c] * ldv;
        __m512 vv[4];
        for (int j = 0; j < 4; j++) vv[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * j)));
        for (int64_t h = 0; h < r; h++) {
            const __m512 w = _mm512_set1_ps(p[h * nc + c]);
            for (int j = 0; j < 4; j++) acc[h][j] = _mm512_fmadd_ps(w, vv[j], acc[h][j]);
        }
    }
    for (int64_t h = 0; h < r; h++) {
        const __m512 inv = _mm512_set1_ps(l[h] > 0.0f ? 1.0f / l[h] : 0.0f);
        for (int j = 0; j < 4; j++) _mm512_storeu_ps(o0 + h * 64 + 16 * j, _mm512_mul_ps(acc[h][j], inv));
    }
}
#endif

/* Query heads per attention task: a row's whole KV-head group when there are enough tasks
 * for the threads, else one head; and the most cells any row sees (the scratch per task). */
static int64_t attn_heads_per_task(int64_t n, int64_t n_head, int64_t n_head_kv) {
    return n * n_head_kv >= 4 * omp_get_max_threads() ? n_head / n_head_kv : 1;
}

static int64_t most_visible(const int64_t *ptr, int64_t n) {
    int64_t most = 1;
    for (int64_t i = 0; i < n; i++) most = ptr[i + 1] - ptr[i] > most ? ptr[i + 1] - ptr[i] : most;
    return most;
}

/* lp_attn_f16's tasks, split among the threads of the enclosing parallel region; p: this
 * thread's scratch of most_visible() * hpt floats. */
static void attn_for(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k,
                     int64_t d_v, const uint16_t *k, const uint16_t *v, int64_t n_kv, const float *mask,
                     const int64_t *ptr, const int64_t *cells, float scale, float *out, int64_t hpt, float *p) {
    const int64_t r = n_head / n_head_kv, ldk = n_head_kv * d_k, ldv = n_head_kv * d_v;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < n * n_head / hpt; t++) {
        const int64_t i = t / (n_head / hpt), h0 = t % (n_head / hpt) * hpt, hk = h0 / r;
        const int64_t c0 = ptr[i], nc = ptr[i + 1] - c0;
        const float *mi = mask + i * n_kv;
#if defined(__AVX512F__)
        if (d_k == 64 && d_v == 64 && hpt <= 4) {
            attn_group_d64(q + i * ldq + h0 * d_k, hpt, k + hk * d_k, v + hk * d_v, ldk, ldv, mi, cells + c0, nc,
                           scale, p, out + i * n_head * d_v + h0 * d_v);
            continue;
        }
#endif
        for (int64_t h = h0; h < h0 + hpt; h++) {
            const float *qh = q + i * ldq + h * d_k;
            float *o = out + i * n_head * d_v + h * d_v;
            for (int64_t j = 0; j < d_v; j++) o[j] = 0.0f;
            float mx = -INFINITY, l = 0.0f;
            for (int64_t c = 0; c < nc; c++) {
                const int64_t cell = cells[c0 + c];
                p[c] = dot_f16(qh, k + cell * ldk + hk * d_k, d_k) * scale + mi[cell];
                mx = p[c] > mx ? p[c] : mx;
            }
            if (nc == 0 || mx == -INFINITY) continue;
#pragma omp simd reduction(+ : l)
            for (int64_t c = 0; c < nc; c++) {
                p[c] = expf(p[c] - mx);
                l += p[c];
            }
            const float inv = 1.0f / l;
            for (int64_t c = 0; c < nc; c++) axpy_f16(o, p[c] * inv, v + cells[c0 + c] * ldv + hk * d_v, d_v);
        }
    }
}

/* Attention of few query rows over an f16 KV cache, through the KQ mask, reading only the
 * cells each row can see: row i's visible cells are cells[ptr[i] .. ptr[i+1]) (the mask's
 * non -inf entries, listed once per ubatch), and mask[i, c] is added to the score (0 for
 * the causal rule).  Two passes per (row, head): the scores and their max, then the
 * softmax-weighted sum of V.  Work is split by (row, KV head), so the cells' K/V rows are
 * read from memory once for the query heads that share them, or by (row, head) when that
 * leaves too few tasks for the threads.
 * q float [n, ldq] with head h at q + h * d_k; k f16 [n_cells, n_head_kv * d_k]; v f16
 * [n_cells, n_head_kv * d_v]; mask float [n, n_kv]; out float [n, n_head * d_v].  Query
 * head h reads KV head h / (n_head / n_head_kv).  A row that sees no cell gets zeros. */
void lp_attn_f16(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k, int64_t d_v,
                 const uint16_t *k, const uint16_t *v, int64_t n_kv, const float *mask, const int64_t *ptr,
                 const int64_t *cells, float scale, float *out) {
    const int64_t hpt = attn_heads_per_task(n, n_head, n_head_kv), most = most_visible(ptr, n);
#pragma omp parallel
    {
        float *p = (float *)malloc((size_t)(most * hpt) * sizeof(float));
        attn_for(q, n, ldq, n_head, n_head_kv, d_k, d_v, k, v, n_kv, mask, ptr, cells, scale, out, hpt, p);
        free(p);
    }
}

/* f32 -> f16, round to nearest even (torch's float16 conversion). */
static inline void store_f16(uint16_t *dst, const float *x, int64_t n) {
    int64_t j = 0;
#if defined(__AVX512F__)
    for (; j + 16 <= n; j += 16)
        _mm256_storeu_si256((__m256i *)(dst + j), _mm512_cvtps_ph(_mm512_loadu_ps(x + j), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; j < n; j++) {
        const _Float16 h = (_Float16)x[j];
        memcpy(dst + j, &h, 2);
    }
}

/* One LLM_ARCH_LLAMA layer's weights and its stream of an f16 KV cache (see lp_llama_layers). */
typedef struct {
    const float *attn_norm, *ffn_norm;                        /* [n_embd] */
    const uint8_t *wqkv, *wo, *ffn_gate_up, *ffn_down;        /* block matrices, stacked as in llama.py */
    int64_t t_qkv, t_o, t_gate_up, t_down;                    /* their GGML types */
    uint16_t *k, *v;                                          /* [n_cells, n_head_kv * d] f16 */
} lp_llama_layer;

typedef struct {
    int64_t n_embd, n_head, n_head_kv, d, n_rot, n_ff;
    float eps, scale;
    int64_t neox;
} lp_llama_dims;

/* Every layer of an LLM_ARCH_LLAMA forward for a ubatch of n (few) rows, in one call and one
 * parallel region, the threads meeting at a barrier after each step: the same steps, in the
 * same order and arithmetic, as llama.py's per-op path with these kernels --
 *   x += wo . attn(rope(wqkv . rms_norm(x)))   (K, V of each row stored in its cell first)
 *   x += ffn_down . swiglu(ffn_gate_up . rms_norm(x))
 * x [n, n_embd] float, updated in place.  cos, sin [n, n_rot/2]; store_cells [n] each row's
 * cell in the cache stream; mask [n, n_kv] and (ptr, cells) the KQ mask and its visible
 * cells as for lp_attn_f16.  Returns 0, or -1 when scratch memory could not be allocated (x
 * and the cache untouched). */
int lp_llama_layers(const lp_llama_layer *L, int64_t n_layer, const lp_llama_dims *hp, float *x, int64_t n,
                    const float *cos_, const float *sin_, const int64_t *store_cells, const float *mask, int64_t n_kv,
                    const int64_t *ptr, const int64_t *cells) {
    const int64_t ne = hp->n_embd, d = hp->d, nq = hp->n_head * d, nk = hp->n_head_kv * d, nqkv = nq + 2 * nk;
    const int64_t n_ff = hp->n_ff, half = hp->n_rot / 2;
    const int64_t wide = ne > nq ? (ne > n_ff ? ne : n_ff) : (nq > n_ff ? nq : n_ff);
    const int64_t hpt = attn_heads_per_task(n, hp->n_head, hp->n_head_kv), most = most_visible(ptr, n);
    const int bf = n > 1 && LP_BF16, i16 = n == 1 && LP_I16;
    float *xn = (float *)malloc((size_t)(n * (ne + nqkv + nq + 3 * n_ff)) * sizeof(float));
    uint16_t *xb = bf ? (uint16_t *)malloc((size_t)(n * wide) * 2) : NULL;
    void *qbuf = i16 ? malloc((size_t)xi16_bytes(wide)) : NULL;
    if (!xn || (bf && !xb) || (i16 && !qbuf)) {
        free(xn);
        free(xb);
        free(qbuf);
        return -1;
    }
    const lp_xi16 xq_buf = xi16_at(qbuf, wide), *xq0 = i16 ? &xq_buf : NULL;
    float *qkv = xn + n * ne, *att = qkv + n * nqkv, *gu = att + n * nq, *h = gu + n * 2 * n_ff;
#pragma omp parallel
    {
        float *p = (float *)malloc((size_t)(most * hpt) * sizeof(float));
        for (int64_t il = 0; il < n_layer; il++) {
            const lp_llama_layer *l = L + il;
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n; r++) rms_norm_row(x + r * ne, l->attn_norm, ne, hp->eps, xn + r * ne);
            const lp_xi16 *xq = prep_x(xn, n, ne, xb, xq0);
            mm_for((int)l->t_qkv, l->wqkv, nqkv, ne, xn, xb, xq, n, qkv, nqkv, 0);
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n; r++) { /* Q and K rotated, then K and V into the row's cell */
                float *row = qkv + r * nqkv;
                rope_row(row, hp->n_head + hp->n_head_kv, d, hp->n_rot, cos_ + r * half, sin_ + r * half, (int)hp->neox);
                store_f16(l->k + store_cells[r] * nk, row + nq, nk);
                store_f16(l->v + store_cells[r] * nk, row + nq + nk, nk);
            }
            attn_for(qkv, n, nqkv, hp->n_head, hp->n_head_kv, d, d, l->k, l->v, n_kv, mask, ptr, cells, hp->scale, att,
                     hpt, p);
            xq = prep_x(att, n, nq, xb, xq0);
            mm_for((int)l->t_o, l->wo, ne, nq, att, xb, xq, n, x, ne, 1);
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n; r++) rms_norm_row(x + r * ne, l->ffn_norm, ne, hp->eps, xn + r * ne);
            xq = prep_x(xn, n, ne, xb, xq0);
            mm_for((int)l->t_gate_up, l->ffn_gate_up, 2 * n_ff, ne, xn, xb, xq, n, gu, 2 * n_ff, 0);
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n; r++) swiglu_row(gu + r * 2 * n_ff, gu + r * 2 * n_ff + n_ff, n_ff, h + r * n_ff);
            xq = prep_x(h, n, n_ff, xb, xq0);
            mm_for((int)l->t_down, l->ffn_down, ne, n_ff, h, xb, xq, n, x, ne, 1);
        }
        free(p);
    }
    free(xn);
    free(xb);
    free(qbuf);
    return 0;
}
