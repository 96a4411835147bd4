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
 * form of an output row (quants.h, lp_unpack_row): int8 values q[n_in], a float scale per
 * 16 values d16[n_in/16] and, for types with a minimum, a float offset per 16 m16[n_in/16],
 * so that w[k] = d16[k/16] * q[k] + m16[k/16] is ggml's dequantization, bit for bit.
 *
 * The activation row of a one-row product (single-sequence decode, where the weights stream
 * from memory) is rounded once to int16 with one scale per block of 32 (lp_xrows, quants.h
 * lp_prepare_x_row): x ~ s * xq, |xq| <= LP_XQ_MAX.  The product is then the sum over 16-groups
 * of d16 * s * (q . xq) + m16 * s * sum16(xq): integer dot products, the same integers on every ISA
 * (only the float sums' order differs); but x86 reads 1-4 rows of Q4_K / Q6_K as ggml's Q8_K, as
 * llama.cpp does (row1q8k_x86.c; rows with an outlier block excepted; with VNNI not on AMD Zen 4,
 * lp_cpu.h), and without VNNI 5-63 rows of them (mm.c q8k_chunk, q8k4_x86.c: no row with an outlier block) and 64+ (q8p_x86.c, Q5_K too),
 * and at AVX2 without VNNI 5-8 and 16+ rows of Q4_0 / Q4_1 / Q5_0 / Q5_1 as ggml's Q8_0 (lanes8_x86.c).  The same int16 form from 16 rows on (a batched decode of 16
 * sequences; on x86 with the rows in vector lanes, lanes_x86.c); from 5 to 15 rows, fp32:
 * each weight row dequantized once, exact products (mm.c).
 *
 * The headers form layers, none including one above it: this file is the base (the ISA macros,
 * the vector helpers, the row-count bounds, the block type ids, the scalar conversions); it
 * includes no other kernel header and declares no kernel file's functions.  Each file that
 * others call declares its functions in its own header (quants.h, unpack_x86.h, dot.h,
 * row1_x86.h, lanes_x86.h, mm.h, amx_x86.h, ops.h, attn_x86.h, kv_quant.h), which includes
 * only the headers of the types it names.  (This file once declared every file's functions, so
 * lp.h, quants.c and row1_x86.c, whose fast paths quants.c calls, depended on one another.) */
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
#if (defined(LP_AVX2) || defined(LP_AVX512)) && !defined(LP_VNNI) && !defined(LP_AVXVNNI)
#define LP_Q8K 1 /* x86 without VNNI: Q4_K / Q6_K products of fewer than LP_Q8K_ROWS rows read ggml's Q8_K (row1q8k_x86.c) */
#elif defined(LP_AVX2) || defined(LP_AVX512)
#define LP_Q8K_FEW 1 /* x86 with VNNI: only their 1-4-row products (row1q8k_x86.c), and not on AMD Zen 4
                      * (lp_cpu.h lp_cpu_q8k_few: the measured figures on both CPUs) */
#endif
#define LP_Q8K_ROWS 64 /* (q8mm_x86.h LP_Q8MM_ROWS: from there int8 with a scale per 32) */
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
    LP_Q2_K = 10, LP_Q3_K = 11, LP_Q4_K = 12, LP_Q5_K = 13, LP_Q6_K = 14, LP_IQ4_NL = 20,
    LP_IQ4_XS = 23, LP_BF16_T = 30, LP_MXFP4 = 39
};

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

#endif
