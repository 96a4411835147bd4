/* llamapy's CPU kernels: shared definitions.
 *
 * One source, built once per ISA level (kernels/build.py): the same files compiled with
 * -march=x86-64-v3 (avx2), -march=x86-64-v4 (+VNNI/BF16 where the CPU has them: avx512),
 * armv8-a(+dotprod) (neon), or with LP_PORTABLE defined (scalar: the reference every SIMD
 * path is tested against).  Code picks its path with the compiler's feature macros:
 *   LP_AVX512 (__AVX512F__ + BW + VL), LP_AVX2 (__AVX2__ + __FMA__ + __F16C__), LP_AVXVNNI
 *   (AVX2 with AVX-VNNI: Intel's AVX2 chips since Alder Lake, built as avx2+vnni),
 *   LP_NEON (__ARM_NEON + aarch64), LP_DOTPROD (__ARM_FEATURE_DOTPROD), none: portable C.
 *
 * Weights stay in the GGUF file's blocks.  Every block type is read through one canonical
 * form of an output row (quants.c, lp_unpack_row): int8 values q[n_in], a float scale per
 * 16 values d16[n_in/16] and, for types with a minimum, a float offset per 16 m16[n_in/16],
 * so that w[k] = d16[k/16] * q[k] + m16[k/16] is ggml's dequantization, bit for bit.
 *
 * The activation row of a one-row product (single-sequence decode, where the weights stream
 * from memory) is rounded once to int16 with one scale per block of 32 (lp_xrows, quants.c
 * lp_prepare_x_row): x ~ s * xq, |xq| <= LP_XQ_MAX.  The product is then the sum over 16-groups
 * of d16 * s * (q . xq) + m16 * s * sum16(xq): integer dot products, the same integers on every ISA
 * (only the float sums' order differs).  The same from 16 rows on (a batched decode of 16
 * sequences; on x86 with the rows in vector lanes, lanes_x86.c); from 5 to 15 rows, fp32:
 * each weight row dequantized once, exact products (mm.c). */
#ifndef LP_H
#define LP_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(LP_PORTABLE) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define LP_AVX512 1
#endif
#if !defined(LP_PORTABLE) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LP_AVX2 1
#endif
#if !defined(LP_PORTABLE) && defined(__ARM_NEON) && defined(__aarch64__)
#define LP_NEON 1
#if defined(__ARM_FEATURE_DOTPROD)
#define LP_DOTPROD 1
#endif
#endif
#if defined(LP_AVX512) && defined(__AVX512VNNI__)
#define LP_VNNI 1
#endif
#if defined(LP_AVX2) && !defined(LP_AVX512) && defined(__AVXVNNI__)
#define LP_AVXVNNI 1 /* vpdpwssd on ymm, VEX-encoded */
#endif
#if defined(LP_AVX512) && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define LP_AMX 1 /* AMX-INT8's tiles for prompt-sized products (amx_x86.c), where Linux grants them */
#endif
#if defined(LP_AVX512) && defined(__AVX512BF16__)
#define LP_BF16 1 /* the CPU multiplies bf16 natively (vdpbf16ps) */
#endif
#if defined(LP_AVX2) || defined(LP_AVX512)
#include <immintrin.h>
#endif
#if defined(LP_NEON)
#include <arm_neon.h>
#endif

#define LP_INLINE static inline __attribute__((always_inline))
/* A weight line requested ahead of its use.  x86: into L2 (prefetcht1).  prefetchnta, which
 * the weight streams used before, fills L1 alone on Intel and starts none of L2's streaming:
 * on a 2-core Intel Xeon (KVM, family 6 model 167) a one-row Q4_1 product streamed 1.8-2.2 ns
 * a block with it, 0.74-0.93 with t1 or t0 (two threads, 70 MB of weights).  Elsewhere the
 * compiler's streaming read hint. */
#if defined(LP_AVX2) || defined(LP_AVX512)
#define LP_PREFETCH_W(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
#else
#define LP_PREFETCH_W(p) __builtin_prefetch((p), 0, 0)
#endif
/* v kept in a vector register: a value used by several instructions is loaded once (GCC may
 * fold its load into each as a memory operand, and loads then bound the loop) */
#if defined(LP_AVX2) || defined(LP_AVX512)
#define LP_IN_REG(v) __asm__("" : "+v"(v))
#elif defined(LP_NEON)
#define LP_IN_REG(v) __asm__("" : "+w"(v))
#else
#define LP_IN_REG(v) (void)(v)
#endif

#if defined(LP_AVX2) || defined(LP_AVX512)
/* acc + the int16 pair products of a and b, per int32 lane (a[2i] b[2i] + a[2i+1] b[2i+1]):
 * one vpdpwssd with VNNI (AVX512-VNNI's EVEX form or AVX-VNNI's VEX form), else vpmaddwd +
 * vpaddd.  The same integers either way. */
LP_INLINE __m256i lp_dpwssd256(__m256i acc, __m256i a, __m256i b) {
#if defined(LP_VNNI)
    return _mm256_dpwssd_epi32(acc, a, b);
#elif defined(LP_AVXVNNI)
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}
#endif
#if defined(LP_AVX512)
/* The same on 512 bits (vpdpwssd zmm with AVX512-VNNI). */
LP_INLINE __m512i lp_dpwssd512(__m512i acc, __m512i a, __m512i b) {
#if defined(LP_VNNI)
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}
#endif

/* A float vector of VW lanes: 16 on AVX-512, 8 on AVX2, 4 on NEON, 1 in portable C.
 * VF_LOADH loads VW f16 values as floats, VF_LOADB VW bf16 values. */
#if defined(LP_AVX512)
#define VW 16
typedef __m512 vf;
#define VF_LOAD(p) _mm512_loadu_ps(p)
#define VF_LOADH(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define VF_LOADB(p) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define VF_STORE(p, v) _mm512_storeu_ps(p, v)
#define VF_SET1(x) _mm512_set1_ps(x)
#define VF_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VF_MUL(a, b) _mm512_mul_ps(a, b)
#define VF_ADD(a, b) _mm512_add_ps(a, b)
#define VF_SUM(v) _mm512_reduce_add_ps(v)
#elif defined(LP_AVX2)
#define VW 8
typedef __m256 vf;
#define VF_LOAD(p) _mm256_loadu_ps(p)
#define VF_LOADH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define VF_LOADB(p) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define VF_STORE(p, v) _mm256_storeu_ps(p, v)
#define VF_SET1(x) _mm256_set1_ps(x)
#define VF_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VF_MUL(a, b) _mm256_mul_ps(a, b)
#define VF_ADD(a, b) _mm256_add_ps(a, b)
LP_INLINE float VF_SUM(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#elif defined(LP_NEON)
#define VW 4
typedef float32x4_t vf;
#define VF_LOAD(p) vld1q_f32(p)
#define VF_LOADH(p) vcvt_f32_f16(vld1_f16((const __fp16 *)(p)))
#define VF_LOADB(p) vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(p)), 16))
#define VF_STORE(p, v) vst1q_f32(p, v)
#define VF_SET1(x) vdupq_n_f32(x)
#define VF_FMA(a, b, c) vfmaq_f32(c, a, b)
#define VF_MUL(a, b) vmulq_f32(a, b)
#define VF_ADD(a, b) vaddq_f32(a, b)
#define VF_SUM(v) vaddvq_f32(v)
#else
#define VW 1
typedef float vf;
#define VF_LOAD(p) (*(p))
#define VF_LOADH(p) lp_f16_to_f32(*(p))
#define VF_LOADB(p) lp_bf16_to_f32(*(p))
#define VF_STORE(p, v) (*(p) = (v))
#define VF_SET1(x) (x)
#define VF_FMA(a, b, c) ((a) * (b) + (c))
#define VF_MUL(a, b) ((a) * (b))
#define VF_ADD(a, b) ((a) + (b))
#define VF_SUM(v) (v)
#endif

#if defined(LP_AVX2) || defined(LP_AVX512)
/* Cephes' exp for a vector x clamped to [-87.3, 88.3], with fx = round(x log2 e), on the
 * intrinsics of prefix P (_mm256, _mm512): the range reduction and the polynomial into y, and the
 * exponent 2^fx into ex (an integer vector).  Both widths share these steps, lane for lane. */
#define LP_EXP_STEPS(P, x, fx, y, ex)                                                                                  \
    do {                                                                                                               \
        x = P##_fnmadd_ps(fx, P##_set1_ps(0.693359375f), x);                                                           \
        x = P##_fnmadd_ps(fx, P##_set1_ps(-2.12194440e-4f), x);                                                        \
        y = P##_set1_ps(1.9875691500e-4f);                                                                             \
        y = P##_fmadd_ps(y, x, P##_set1_ps(1.3981999507e-3f));                                                         \
        y = P##_fmadd_ps(y, x, P##_set1_ps(8.3334519073e-3f));                                                         \
        y = P##_fmadd_ps(y, x, P##_set1_ps(4.1665795894e-2f));                                                         \
        y = P##_fmadd_ps(y, x, P##_set1_ps(1.6666665459e-1f));                                                         \
        y = P##_fmadd_ps(y, x, P##_set1_ps(5.0000001201e-1f));                                                         \
        y = P##_fmadd_ps(y, P##_mul_ps(x, x), P##_add_ps(x, P##_set1_ps(1.0f)));                                       \
        ex = P##_slli_epi32(P##_add_epi32(P##_cvtps_epi32(fx), P##_set1_epi32(127)), 23);                              \
    } while (0)

/* exp(x) for 8 floats (x86: AVX2 and the AVX-512 level): Cephes' range reduction and polynomial,
 * within 2 ulp of expf; x below -87.3 (and -inf) gives 0, x above 88.3 gives exp(88.3). */
LP_INLINE __m256 lp_exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 y;
    __m256i e;
    LP_EXP_STEPS(_mm256, x, fx, y, e);
    return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}
#endif

#if defined(LP_AVX512)
/* lp_exp8 on 16 floats: the same values lane by lane, at half the instructions. */
LP_INLINE __m512 lp_exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f);
    const __mmask16 seen = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 y;
    __m512i e;
    LP_EXP_STEPS(_mm512, x, fx, y, e);
    return _mm512_maskz_mul_ps(seen, y, _mm512_castsi512_ps(e));
}
#endif

#define LP_XQ_MAX 32639.0f /* |xq| bound: 127 * 256 + 127, so xq splits into two int8 (dotprod) */
#define LP_F32_ROWS 5 /* products of this many rows or more take a bf16 CPU's bf16 tiles for its coarse types (mm.c) */
#define LP_DENSE_ROWS 128 /* kernels/types.py DENSE_ROWS: products of this many rows reach lp_mm only where the caller
                           * chose the integer lanes (model/block_matrix.py), so they take them whatever coarse_bf16 */
#define LP_FEW_ROWS 8 /* products of at most this many rows take the integer products (mm.c); 9..15 rows the fp32 tiles */
#if defined(LP_AVX512) || defined(LP_NEON)
#define LP_TW 4 /* fp32 tiles: weight rows x activation rows (32 vector registers) */
#define LP_TX 6
#else
#define LP_TW 3 /* (16 vector registers) */
#define LP_TX 4
#endif

/* GGMLQuantizationType values */
enum {
    LP_F32 = 0, LP_F16 = 1, LP_Q4_0 = 2, LP_Q4_1 = 3, LP_Q5_0 = 6, LP_Q5_1 = 7, LP_Q8_0 = 8,
    LP_Q2_K = 10, LP_Q3_K = 11, LP_Q4_K = 12, LP_Q5_K = 13, LP_Q6_K = 14, LP_BF16_T = 30
};

/* Elements per block and bytes per block of a type; 0 bytes: not a type of these kernels. */
int lp_block_elems(int type);
int lp_block_bytes(int type);
int lp_has_min(int type);     /* w = d q + m with a real m (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) */
int lp_g16(int type);         /* a scale per 16-group (Q2_K, Q3_K, Q6_K), not per block of 32 */
int lp_is_float(int type);    /* F32, F16, BF16: no blocks, products in fp32 */
int64_t lp_row_bytes(int type, int64_t n_in);

static inline float lp_f16_to_f32(uint16_t h) {
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}

static inline float lp_bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t lp_f32_to_bf16(float f) { /* round to nearest even (no NaNs occur here) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static inline uint16_t lp_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t lp_rd32(const uint8_t *p) { return p[0] | (p[1] << 8) | (p[2] << 16) | ((uint32_t)p[3] << 24); }

/* One output row in canonical form (see the top of this file). */
typedef struct {
    int8_t *q;    /* [n_in] */
    float *d16;   /* [n_in / 16] */
    float *m16;   /* [n_in / 16], all zero for types without a minimum */
} lp_wrow;

/* Few activation rows prepared for the integer products (lp_prepare_x). */
typedef struct {
    int64_t n_in, n;  /* row length, rows */
    int16_t *q;       /* [n, n_in] x / s, rounded to nearest even */
    float *s;         /* [n, n_in / 32] max |x| / LP_XQ_MAX per block of 32 */
    float *sum16;     /* [n, n_in / 16] s * the integer sum of q per 16 */
    float *sum32;     /* [n, n_in / 32] s * the integer sum of q per 32 */
    int8_t *qh, *ql;  /* dotprod builds: q = 256 qh + ql, [n, n_in] each; else NULL */
} lp_xrows;

/* Activation rows laid out "rows in lanes" for x86's integer products of LP_F32_ROWS rows or
 * more (lanes_x86.c; mm.c decides which): per group of LP_NL rows, lane r of each vector is row
 * r's (the twin lanes: row r in lanes 2r and 2r + 1). */
typedef struct {
    int64_t n_in, n_grp; /* row length, groups of LP_NL rows */
    int32_t *q;          /* [n_grp, n_in / 2, LP_NL] each lane's pair of int16 (xrows' q) */
    float *s, *sum32;    /* [n_grp, n_in / 32, LP_NL] */
    float *sum16;        /* [n_grp, n_in / 16, LP_NL] */
} lp_xlanes;
#if defined(LP_AVX2) || defined(LP_AVX512)
#define LP_LANES 1
#if defined(LP_AVX512)
#define LP_NL 16 /* rows per lane group: a zmm of int32 */
#else
#define LP_NL 8
#endif
size_t lp_xlanes_bytes(int64_t n_in, int64_t n);
lp_xlanes lp_xlanes_at(void *buf, int64_t n_in, int64_t n);
void lp_xlanes_fill(const lp_xrows *xr, int64_t n, lp_xlanes l, int64_t b, int per); /* per: lanes a row (1, 2: twin) */
/* nw (1..4) weight rows (w16: their canonical q widened to int16, lp_widen_q; wr: their d16,
 * m16) against the LP_NL rows of each of ng (1, 2) lane groups from g0, in rows: activation row
 * LP_NL i + lane's outputs at y[(LP_NL i + lane) ldy + j], j < 4 (four written whatever nw: the
 * columns past nw hold zeros). */
void lp_lanes_tile(int ng, int nw, int g16, int has_min, const int16_t *const *w16, const lp_wrow *wr,
                   const lp_xlanes *l, int64_t g0, const char *pf, int64_t pf_lines, float *y, int64_t ldy);
void lp_widen_q(const int8_t *q, int64_t n_in, int16_t *out);
int lp_unpack_row16(int type, const uint8_t *row, int64_t n_in, int16_t *q16, float *d16, float *m16); /* row1_x86.c */
#endif
#if defined(LP_AVX512)
/* Twin lanes (lanes_x86.c): LP_F32_ROWS..LP_FEW_ROWS rows, each in two adjacent lanes of one
 * group, against weight rows paired by lp_twin_pair; np (1..4) pairs: y[16 j + 2 r + h]. */
#define LP_TWIN 1
void lp_twin_pair(const int16_t *a, const int16_t *b, const lp_wrow *wa, const lp_wrow *wb, int64_t n_in, int32_t *ab,
                  float *dm);
/* Rows a and b of a 32-element block type straight into lp_twin_pair's ab and dm (row1_x86.c); 0
 * for the other types. */
int lp_unpack_pair16(int type, const uint8_t *a, const uint8_t *b, int64_t n_in, int32_t *ab, float *dm);
void lp_twin_tile(int np, int g16, int has_min, const int32_t *const *ab, const float *const *dm, const lp_xlanes *l,
                  const char *pf, int64_t pf_lines, float *y);
#endif

/* quants.c */
size_t lp_wrow_bytes(int64_t n_in);
lp_wrow lp_wrow_at(void *buf, int64_t n_in);
void lp_unpack_row(int type, const uint8_t *row, int64_t n_in, lp_wrow w);
void lp_row_to_f32(int type, const uint8_t *row, int64_t n_in, float *out, lp_wrow scratch);
size_t lp_xrows_bytes(int64_t n_in, int64_t n);
lp_xrows lp_xrows_at(void *buf, int64_t n_in, int64_t n);
void lp_prepare_x_row(const float *x, lp_xrows xr, int64_t r);

/* dot.c: w . x_r for row r of xr (integer products), and the fp32 products of nw <= LP_TW
 * float rows w[j] against n <= LP_TX rows of x (row stride ldx) into y[LP_TX j + i]. */
float lp_dot_row(int g16, int has_min, lp_wrow w, const lp_xrows *xr, int64_t r);
enum { LP_WF32 = 0, LP_WF16 = 1, LP_WBF16 = 2 }; /* the float kinds of weight rows lp_dot_tile_f32 reads */
void lp_dot_tile_f32(int kind, const void *const *w, int nw, int64_t n_in, const float *x, int64_t ldx, int n,
                     float *y);
#define LP_FROWS 8 /* f16 / bf16 weights against at most this many rows: one weight row at a time (lp_dot_float_rows) */
#define LP_FROWS_GROUPED 16 /* ... and up to this many in groups (mm.c float_row_groups) */
/* ... and from LP_F32_ROWS rows two weight rows at a time where their 2 n accumulators, the two
 * weight vectors and an activation fit the vector registers (32; 16 at AVX2) */
#if defined(LP_AVX2) && !defined(LP_AVX512)
#define LP_FROWS2 6
#else
#define LP_FROWS2 LP_FROWS
#endif
void lp_dot_float_rows(int kind, const void *w, const void *w1, const float *x, int64_t ldx, int64_t n_in, int n,
                       float *y);
#if defined(LP_BF16)
/* ... and in bf16 on a CPU with AVX512-BF16 (rows as bf16, n_in a multiple of 32): nw <= 3
 * weight rows, n <= 4 activation rows, y[LP_TX j + i] */
void lp_dot_tile_bf16(const uint16_t *const *w, int nw, int64_t n_in, const uint16_t *x, int64_t ldx, int n, float *y);
void lp_to_bf16(const float *x, int64_t n, uint16_t *out);
#endif
/* Products of few rows of this type take bf16 on this CPU (its coarse types, kernels/types.py
 * BF16_GEMM_TYPES: Q4_0, Q4_1, Q2_K, Q3_K, BF16)? */
static inline int lp_bf16_rows(int type, int64_t n_in) {
#if defined(LP_BF16)
    return n_in % 32 == 0 && (type == LP_Q4_0 || type == LP_Q4_1 || type == LP_Q2_K || type == LP_Q3_K || type == LP_BF16_T);
#else
    (void)type, (void)n_in;
    return 0;
#endif
}
/* row1_x86.c: one row straight from the blocks; 0 where the type has no such path here. */
int lp_dot_row1(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r, float *y);
/* One weight row against activation rows r0..r0+nx-1 (nx 2..4) of the 32-element block types,
 * each block decoded once: y[0..nx); 0 where not available. */
int lp_dot_rows_x(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r0, int nx, float *y);
int lp_dot_row1x2(int type, const uint8_t *w0, const uint8_t *w1, int64_t n_in, const lp_xrows *xr, int64_t r,
                  float *y);
int lp_row_to_f32_fast(int type, const uint8_t *row, int64_t n_in, float *out);

/* ops.c, used by mm.c and layers.c */
void lp_rms_norm_row(const float *x, const float *w, int64_t n, float eps, float *out);
void lp_swiglu_row(const float *g, const float *u, int64_t n_ff, float *out);
void lp_geglu_row(const float *g, const float *u, int64_t n_ff, float *out);
void lp_rope_row(float *x, int64_t n_head, int64_t d, int64_t n_rot, const float *c, const float *s, int neox);
void lp_store_f16(uint16_t *dst, const float *x, int64_t n);
int64_t lp_attn_heads_per_task(int64_t n_head, int64_t n_head_kv);
int64_t lp_attn_chunks(int64_t n, int64_t n_head, int64_t n_head_kv, int64_t most, int n_threads);
int64_t lp_attn_part_floats(int64_t n, int64_t n_head, int64_t d_v, int64_t n_chunk);
int64_t lp_most_visible(const int64_t *ptr, int64_t n);
int64_t lp_attn_kv_floats(int64_t most, int64_t d_k, int64_t d_v);
void lp_attn_for(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k,
                 int64_t d_v, int tk, const void *k, int tv, const void *v, int64_t n_kv, const float *mask,
                 const int64_t *ptr, const int64_t *cells, float scale, float *out, int64_t ldo, int64_t hpt,
                 int64_t n_chunk, float *p, float *part, const int64_t *cell_off, float *kvf);

/* attn_x86.c: ops.c's attention of one row's head group, vectorized for x86 (K and V rows f16,
 * or f32 with f32 set); 0 where it does not apply (head sizes not multiples of 8 / 32, or not x86). */
int lp_attn_group_x86(const float *q0, int64_t hpt, int64_t d_k, int64_t d_v, const void *k, const void *v, int64_t ldk,
                      int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale, float *p, float *o,
                      float *ms, int f32);

/* kv_quant.c: the KV cache's storage types (LP_F16, and ggml's blocks of 32: LP_Q8_0, LP_Q4_0,
 * LP_Q4_1, LP_Q5_0, LP_Q5_1): a row of n values stored (ggml's quantize_row_*_ref; read back by
 * lp_row_to_f32); lp_kv_row_bytes: its bytes. */
int lp_kv_type_ok(int type);
/* K and V of these types with heads of d_k / d_v values: what the attention reads (a block-typed
 * head whole blocks of 32; kernels/types.py c_kv_types is the same rule) */
int lp_kv_types_ok(int tk, int tv, int64_t d_k, int64_t d_v);
static inline int64_t lp_kv_row_bytes(int type, int64_t n) { return type == LP_F16 ? 2 * n : lp_row_bytes(type, n); }
void lp_kv_store(int type, void *dst, const float *x, int64_t n);

/* mm.c: the product split among the threads of an enclosing parallel region. */
typedef struct {
    lp_xrows xr;       /* the integer form */
    lp_xlanes xl;      /* x86, LP_F32_ROWS rows or more (mm.c lanes_bytes): xr's rows in lanes */
    uint16_t *xb;      /* the rows as bf16 (AVX512-BF16 builds, 2 rows or more), else NULL */
    int8_t *xhi, *xlo; /* LP_READS_AMX: xr's int16 rows as 256 hi + lo, [n rounded up to 16, n_in] each; else NULL */
    const float *x;    /* fp32 rows */
    int64_t n, n_in;
    int reads;         /* LP_READS_INTS | LP_READS_BF16: the forms the products of xp read (lp_xprep_at: both;
                        * lp_mm: its type's, lp_xprep_reads) -- lp_prep_row makes only these */
} lp_xprep;
#define LP_READS_INTS 1
#define LP_READS_BF16 2
#define LP_READS_AMX 4 /* with LP_READS_INTS: the integer products on AMX tiles (lp_mm's prompt-sized products) */
size_t lp_xprep_bytes(int64_t n_in, int64_t n);
lp_xprep lp_xprep_at(void *buf, int64_t n_in, int64_t n, const float *x);
int lp_needs_prep(const lp_xprep *xp);
void lp_prep_row(lp_xprep *xp, int64_t r);
void lp_prep_for(lp_xprep *xp);
void lp_lanes_for(const lp_xprep *xp);
size_t lp_mm_scratch_bytes(int64_t n_in);
void lp_mm_for(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const lp_xprep *xp, float *y, int64_t ldy,
               int accumulate, void *scratch);

/* amx_x86.c: prompt-sized products on AMX tiles, the lanes' sums bit for bit (LP_AMX builds;
 * elsewhere lp_amx_on is 0) */
int lp_amx_on(void);
int lp_amx_set(int on);
#if defined(LP_AMX)
void lp_amx_split_row(const int16_t *q, int64_t n_in, int8_t *hi, int8_t *lo);
size_t lp_amx_scratch_bytes(int64_t n_in);
void lp_amx_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xprep *xp, float *y,
                  int64_t ldy, int accumulate, void *scratch);
#endif

#endif
