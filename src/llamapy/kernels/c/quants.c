/* Block formats: ggml's layouts read into the canonical row form (lp.h), dequantization
 * (bit for bit ggml's / gguf's arithmetic: w = d * q, then + m where the type has one, never
 * fused into an FMA: the build passes -ffp-contract=off), and the activation rows of the
 * integer products.  Portable C; the loops are simple enough for the compiler to vectorize
 * for each ISA level it is built for. */
#include "quants.h"
#include "lp_cpu.h"
#include "q8kz_x86.h"
#include "row1q8k_x86.h"
#include "quants_iq.h"
#include "unpack_x86.h"

int lp_block_elems(int type) {
    switch (type) {
    case LP_F32: case LP_F16: case LP_BF16_T: return 1;
    case LP_Q4_0: case LP_Q4_1: case LP_Q5_0: case LP_Q5_1: case LP_Q8_0: case LP_IQ4_NL: case LP_MXFP4: return 32;
    case LP_Q2_K: case LP_Q3_K: case LP_Q4_K: case LP_Q5_K: case LP_Q6_K: case LP_IQ4_XS: return 256;
    default: return 0;
    }
}

int lp_block_bytes(int type) {
    switch (type) {
    case LP_F32: return 4;
    case LP_F16: case LP_BF16_T: return 2;
    case LP_Q4_0: return 18;
    case LP_Q4_1: return 20;
    case LP_Q5_0: return 22;
    case LP_Q5_1: return 24;
    case LP_Q8_0: return 34;
    case LP_Q2_K: return 84;
    case LP_Q3_K: return 110;
    case LP_Q4_K: return 144;
    case LP_Q5_K: return 176;
    case LP_Q6_K: return 210;
    case LP_IQ4_NL: return 18;
    case LP_IQ4_XS: return 136;
    case LP_MXFP4: return 17;
    default: return 0;
    }
}

int lp_has_min(int type) {
    return type == LP_Q4_1 || type == LP_Q5_1 || type == LP_Q2_K || type == LP_Q4_K || type == LP_Q5_K;
}

int lp_g16(int type) { return type == LP_Q2_K || type == LP_Q3_K || type == LP_Q6_K; }

int lp_is_float(int type) { return type == LP_F32 || type == LP_F16 || type == LP_BF16_T; }

int64_t lp_row_bytes(int type, int64_t n_in) { return n_in / lp_block_elems(type) * lp_block_bytes(type); }

size_t lp_wrow_bytes(int64_t n_in) { return (size_t)n_in + 2 * (size_t)(n_in / 16) * sizeof(float) + 64; }

lp_wrow lp_wrow_at(void *buf, int64_t n_in) {
    float *d = (float *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    lp_wrow w = {(int8_t *)(d + 2 * (n_in / 16)), d, d + n_in / 16};
    return w;
}

/* ---- one block of each type into q (its 32 or 256 values), d16 and m16 (2 or 16 each) -- */

static void unpack_q4_0(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    const float d = lp_f16_to_f32(lp_rd16(b));
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b[2 + j] & 15) - 8);
        q[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
    }
    d16[0] = d16[1] = d;
    m16[0] = m16[1] = 0.0f;
}

static void unpack_q4_1(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(b[4 + j] & 15);
        q[j + 16] = (int8_t)(b[4 + j] >> 4);
    }
    d16[0] = d16[1] = lp_f16_to_f32(lp_rd16(b));
    m16[0] = m16[1] = lp_f16_to_f32(lp_rd16(b + 2));
}

static void unpack_q5(const uint8_t *qh4, const uint8_t *qs, int off, int8_t *q) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 15) | (((qh >> j) & 1) << 4)) - off);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - off);
    }
}

static void unpack_q5_0(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    unpack_q5(b + 2, b + 6, 16, q);
    d16[0] = d16[1] = lp_f16_to_f32(lp_rd16(b));
    m16[0] = m16[1] = 0.0f;
}

static void unpack_q5_1(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    unpack_q5(b + 4, b + 8, 0, q);
    d16[0] = d16[1] = lp_f16_to_f32(lp_rd16(b));
    m16[0] = m16[1] = lp_f16_to_f32(lp_rd16(b + 2));
}

static void unpack_q8_0(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    memcpy(q, b + 2, 32);
    d16[0] = d16[1] = lp_f16_to_f32(lp_rd16(b));
    m16[0] = m16[1] = 0.0f;
}

/* Q2_K: scales[16] (low nibble scale, high nibble min) | qs[64] | d | dmin. */
static void unpack_q2_k(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    const float d = lp_f16_to_f32(lp_rd16(b + 80)), dmin = lp_f16_to_f32(lp_rd16(b + 82));
    for (int n = 0; n < 2; n++) {
        const uint8_t *qs = b + 16 + 32 * n;
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) q[128 * n + 32 * j + l] = (int8_t)((qs[l] >> (2 * j)) & 3);
    }
    for (int g = 0; g < 16; g++) {
        d16[g] = d * (float)(b[g] & 15);
        m16[g] = -(dmin * (float)(b[g] >> 4));
    }
}

/* Q3_K: hmask[32] | qs[64] | scales[12] (16 6-bit values) | d. */
static void unpack_q3_k(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    const float d = lp_f16_to_f32(lp_rd16(b + 108));
    for (int g = 0; g < 16; g++) {
        const int lo = g < 8 ? (sc[g] & 15) : (sc[g - 8] >> 4);
        const int hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
        d16[g] = d * (float)((lo | (hi << 4)) - 32);
        m16[g] = 0.0f;
    }
    for (int n = 0; n < 2; n++)
        for (int j = 0; j < 4; j++) {
            const int bit = 4 * n + j;
            for (int l = 0; l < 32; l++)
                q[128 * n + 32 * j + l] =
                    (int8_t)(((qs[32 * n + l] >> (2 * j)) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4));
        }
}

/* The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block (ggml's get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void k4_scales(const uint8_t *b, float *d16, float *m16) {
    const float d = lp_f16_to_f32(lp_rd16(b)), dmin = lp_f16_to_f32(lp_rd16(b + 2));
    for (int j = 0; j < 8; j++) {
        int sc, m;
        scale_min_k4(j, b + 4, &sc, &m);
        d16[2 * j] = d16[2 * j + 1] = d * (float)sc;
        m16[2 * j] = m16[2 * j + 1] = -(dmin * (float)m);
    }
}

/* Q4_K: d | dmin | scales[12] | qs[128]. */
static void unpack_q4_k(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    k4_scales(b, d16, m16);
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
            q[64 * j + l] = (int8_t)(b[16 + 32 * j + l] & 15);
            q[64 * j + 32 + l] = (int8_t)(b[16 + 32 * j + l] >> 4);
        }
}

/* Q5_K: d | dmin | scales[12] | qh[32] | qs[128]. */
static void unpack_q5_k(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    k4_scales(b, d16, m16);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
            q[64 * j + l] = (int8_t)((qs[32 * j + l] & 15) | (((qh[l] >> (2 * j)) & 1) << 4));
            q[64 * j + 32 + l] = (int8_t)((qs[32 * j + l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4));
        }
}

/* Q6_K: ql[128] | qh[64] | scales[16] int8 | d. */
static void unpack_q6_k(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    const float d = lp_f16_to_f32(lp_rd16(b + 208));
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int g = 0; g < 16; g++) {
        d16[g] = d * (float)sc[g];
        m16[g] = 0.0f;
    }
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
        int8_t *o = q + 128 * n;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

/* A block-type row of n_in values in canonical form (see lp.h); one loop per type, so each
 * block's unpacking is inlined and vectorized. */
void lp_unpack_row(int type, const uint8_t *row, int64_t n_in, lp_wrow w) {
#define ROW(fn, be, bb)                                                                                                \
    for (int64_t b = 0; b < n_in / (be); b++) fn(row + b * (bb), w.q + b * (be), w.d16 + b * ((be) / 16), w.m16 + b * ((be) / 16)); \
    break;
    switch (type) {
    case LP_Q4_0: ROW(unpack_q4_0, 32, 18)
    case LP_Q4_1: ROW(unpack_q4_1, 32, 20)
    case LP_Q5_0: ROW(unpack_q5_0, 32, 22)
    case LP_Q5_1: ROW(unpack_q5_1, 32, 24)
    case LP_Q8_0: ROW(unpack_q8_0, 32, 34)
    case LP_Q2_K: ROW(unpack_q2_k, 256, 84)
    case LP_Q3_K: ROW(unpack_q3_k, 256, 110)
    case LP_Q4_K: ROW(unpack_q4_k, 256, 144)
    case LP_Q5_K: ROW(unpack_q5_k, 256, 176)
    case LP_Q6_K: ROW(unpack_q6_k, 256, 210)
    default: lp_unpack_row_iq(type, row, n_in, w);
    }
#undef ROW
}

/* A row as float32: ggml's dequantization (float types converted exactly).  scratch: a
 * canonical row of n_in (unused for float types). */
void lp_row_to_f32(int type, const uint8_t *row, int64_t n_in, float *out, lp_wrow scratch) {
    if (type == LP_F32) {
        memcpy(out, row, (size_t)n_in * 4);
        return;
    }
    if (type == LP_F16 || type == LP_BF16_T) {
        const uint16_t *h = (const uint16_t *)row;
        if (type == LP_F16) {
            int64_t k = 0;
            for (; k + VW <= n_in; k += VW) VF_STORE(out + k, VF_LOADH(h + k)); /* F16C / NEON conversion */
            for (; k < n_in; k++) out[k] = lp_f16_to_f32(h[k]);
        } else
            for (int64_t k = 0; k < n_in; k++) out[k] = lp_bf16_to_f32(h[k]);
        return;
    }
    if (lp_row_to_f32_fast(type, row, n_in, out)) return;
    lp_unpack_row(type, row, n_in, scratch);
    if (lp_has_min(type)) {
        for (int64_t g = 0; g < n_in / 16; g++)
            for (int j = 0; j < 16; j++) {
                const float t = scratch.d16[g] * (float)scratch.q[16 * g + j];
                out[16 * g + j] = t + scratch.m16[g];
            }
    } else {
        for (int64_t g = 0; g < n_in / 16; g++)
            for (int j = 0; j < 16; j++) out[16 * g + j] = scratch.d16[g] * (float)scratch.q[16 * g + j];
    }
}

/* ---- activation rows for the integer products ---------------------------------------- */

size_t lp_xrows_bytes(int64_t n_in, int64_t n) {
    size_t b = (size_t)(n * n_in) * 2 + 2 * (size_t)(n * (n_in / 32)) * 4 + (size_t)(n * (n_in / 16)) * 4 + 4 * 64;
    if (lp_xrows_split(n)) b += 2 * (size_t)(n * n_in) + (size_t)(n * (n_in / 16)) * 4 + 2 * 64;
    if (lp_xrows_q8k(n)) b += (size_t)(n * n_in) + (size_t)(n * (n_in / 256)) * 4 + (size_t)(n * (n_in / 16)) * 2 + (size_t)n + 4 * 64;
    return b;
}

int lp_xrows_q8k(int64_t n) {
#if defined(LP_Q8K)
    return n < LP_Q8K_ROWS;
#elif defined(LP_Q8K_FEW)
    return (n < LP_F32_ROWS && lp_cpu_q8k_few()) || lp_q8kz_takes(n); /* (q8kz_x86.c: 2-127 rows at AVX-512 VNNI) */
#else
    (void)n;
    return 0;
#endif
}

int lp_xrows_split(int64_t n) {
#if defined(LP_DOTPROD)
    (void)n;
    return 1;
#elif defined(LP_AVX2) || defined(LP_AVX512)
    return n < LP_F32_ROWS;
#else
    (void)n;
    return 0;
#endif
}

static void *align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

lp_xrows lp_xrows_at(void *buf, int64_t n_in, int64_t n) {
    lp_xrows x;
    x.n_in = n_in;
    x.n = n;
    x.q = (int16_t *)align64(buf);
    x.s = (float *)align64(x.q + n * n_in);
    x.sum16 = (float *)align64(x.s + n * (n_in / 32));
    x.sum32 = (float *)align64(x.sum16 + n * (n_in / 16));
    x.qh = x.ql = NULL;
    x.isum16 = NULL;
    if (lp_xrows_split(n)) {
        x.qh = (int8_t *)align64(x.sum32 + n * (n_in / 32));
        x.ql = x.qh + n * n_in;
        x.isum16 = (int32_t *)align64(x.ql + n * n_in);
    }
    x.q8 = NULL, x.d8 = NULL, x.bs8 = NULL, x.q8on = NULL;
    if (lp_xrows_q8k(n)) {
        x.q8 = (int8_t *)align64(x.isum16 ? (void *)(x.isum16 + n * (n_in / 16)) : (void *)(x.sum32 + n * (n_in / 32)));
        x.d8 = (float *)align64(x.q8 + n * n_in);
        x.bs8 = (int16_t *)align64(x.d8 + n * (n_in / 256));
        x.q8on = (uint8_t *)align64(x.bs8 + n * (n_in / 16));
    }
    return x;
}

/* max |x[j]| over 32 floats, from 0, a NaN skipped: mx = |x| > mx ? |x| : mx in any order (the
 * largest of a set; |x| is never -0), so the vector forms below equal the scalar loop.  (GCC does
 * not vectorize the loop itself: a serial chain of vmaxss, half of the rows' preparation.)
 * vmaxps a, m returns m unless a > m, a NaN included; NEON's vmaxq would pass a NaN on. */
static inline float absmax32(const float *x) {
#if defined(LP_AVX512)
    const __m512 abs = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 m = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x), abs), _mm512_setzero_ps());
    m = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x + 16), abs), m);
    const __m256 h = _mm256_max_ps(_mm512_extractf32x8_ps(m, 1), _mm512_castps512_ps256(m));
#elif defined(LP_AVX2)
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 h = _mm256_setzero_ps();
    for (int j = 0; j < 32; j += 8) h = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs), h);
#endif
#if defined(LP_AVX512) || defined(LP_AVX2)
    __m128 q = _mm_max_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    q = _mm_max_ps(_mm_movehl_ps(q, q), q);
    q = _mm_max_ss(_mm_movehdup_ps(q), q);
    return _mm_cvtss_f32(q);
#elif defined(LP_NEON)
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int j = 0; j < 32; j += 4) {
        const float32x4_t a = vabsq_f32(vld1q_f32(x + j));
        m = vbslq_f32(vcgtq_f32(a, m), a, m);
    }
    return vmaxvq_f32(m); /* no NaN left in m */
#else
    float mx = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float a = fabsf(x[j]);
        mx = a > mx ? a : mx;
    }
    return mx;
#endif
}

/* Row r of x [n_in] into xr: per block of 32, s = max |x| / LP_XQ_MAX and xq = x / s rounded
 * to nearest even (the same integers on every ISA: one scalar division per block, then
 * IEEE products); sum16 and sum32 = s * the exact integer sum of xq, not the sum of x.  That is
 * ggml's choice too (Q8_1's s = d sum(qs), Q8_K's bsums), and the more accurate one: a
 * minimum's term m sum(x̂) then joins d q . x̂ into w . x̂, whose rounding errors cancel around
 * w's centre, where with the exact sum(x) they are weighted by q's 0..15 (all of one sign): on
 * a random 64-wide Q4_1 product (3 x 64 x 64, 2000 activation rows) the worst error, relative to
 * the largest output, fell from 1.07e-4 to 4.04e-5. */
void lp_prepare_x_row(const float *x, lp_xrows xr, int64_t r) {
    const int64_t n_in = xr.n_in;
    int16_t *q = xr.q + r * n_in;
    float *s = xr.s + r * (n_in / 32), *sum = xr.sum16 + r * (n_in / 16);
    for (int64_t b = 0; b < n_in / 32; b++) {
        const float *xb = x + 32 * b;
        const float mx = absmax32(xb);
        const float inv = mx > 0.0f ? LP_XQ_MAX / mx : 0.0f;
        s[b] = mx / LP_XQ_MAX;
        for (int j = 0; j < 32; j++) {
            float v = rintf(xb[j] * inv);
            v = v > LP_XQ_MAX ? LP_XQ_MAX : v < -LP_XQ_MAX ? -LP_XQ_MAX : v;
            q[32 * b + j] = (int16_t)v;
        }
    }
    for (int64_t b = 0; b < n_in / 32; b++) {
        int32_t t0 = 0, t1 = 0; /* exact: |t| <= 16 * LP_XQ_MAX */
        for (int j = 0; j < 16; j++) t0 += q[32 * b + j], t1 += q[32 * b + 16 + j];
        sum[2 * b] = s[b] * (float)t0;
        sum[2 * b + 1] = s[b] * (float)t1;
        xr.sum32[r * (n_in / 32) + b] = s[b] * (float)(t0 + t1);
        if (xr.isum16) xr.isum16[r * (n_in / 16) + 2 * b] = t0, xr.isum16[r * (n_in / 16) + 2 * b + 1] = t1;
    }
    if (xr.qh) {
        int8_t *qh = xr.qh + r * n_in, *ql = xr.ql + r * n_in;
        for (int64_t k = 0; k < n_in; k++) {
            const int h = (q[k] + 128) >> 8;
            qh[k] = (int8_t)h;
            ql[k] = (int8_t)(q[k] - 256 * h);
        }
    }
    if (xr.q8) lp_prepare_q8k_row(x, xr, r);
}
