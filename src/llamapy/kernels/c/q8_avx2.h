/* q8_avx2.h: the AVX2 level's helpers for rounding activation rows to int8 (q8mm_256.inc,
 * q8mm32_256.inc): horizontal max and sums, a block's outlier figures, 32 int32 as int8. */
#ifndef LP_Q8_AVX2_H
#define LP_Q8_AVX2_H

#include "lp.h"

#if defined(LP_AVX2)
LP_INLINE float q8_hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

LP_INLINE float q8_hsum(__m256 v) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)));
}

LP_INLINE int32_t q8_hsum_i(__m256i v) {
    __m128i m = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(m, _mm_shuffle_epi32(m, 0xb1)));
}

/* A block of 32: max |x| and the sum of squares (the outlier rule's two figures). */
LP_INLINE void q8_stats(const float *xb, float *amax, float *ss) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8), x2 = _mm256_loadu_ps(xb + 16),
                 x3 = _mm256_loadu_ps(xb + 24);
    const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, x0), _mm256_andnot_ps(sign, x1)),
                                   _mm256_max_ps(_mm256_andnot_ps(sign, x2), _mm256_andnot_ps(sign, x3)));
    *amax = q8_hmax(m);
    *ss = q8_hsum(_mm256_fmadd_ps(x0, x0, _mm256_fmadd_ps(x1, x1, _mm256_fmadd_ps(x2, x2, _mm256_mul_ps(x3, x3)))));
}

/* 32 int32 values (4 ymm, in order) as int8, saturated. */
LP_INLINE void q8_store_i8(int8_t *q, const __m256i v[4]) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

#endif
#endif
