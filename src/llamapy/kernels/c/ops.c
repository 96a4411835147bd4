/* The row-wise operations of a decode step: rms_norm, SwiGLU / GeGLU, RoPE, f16 stores (the
 * attention: attn.c). */
#include "ops.h"

/* out = x / sqrt(mean(x^2) + eps) * w over one row of n (ggml_rms_norm then ggml_mul); w may
 * be NULL.  out may be x. */
void lp_rms_norm_row(const float *x, const float *w, int64_t n, float eps, float *out) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    const float s = 1.0f / sqrtf(ss / (float)n + eps);
    if (w) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * s * w[i];
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * s;
    }
}

/* out[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i] over one row of n_ff; on x86 the
 * exponentials 8 at a time (lp_exp8; benchmarks/row_ops.py: a row of 1536 7.6 -> 4.4 us a call on a
 * Zen 4, scalar expf before). */
void lp_swiglu_row(const float *g, const float *u, int64_t n_ff, float *out) {
    int64_t i = 0;
#if defined(LP_AVX2) || defined(LP_AVX512)
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n_ff; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = lp_exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
#endif
    for (; i < n_ff; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* out[i] = gelu(g[i]) * u[i], gelu's tanh form (ggml_gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
 * On x86 as x / (1 + exp(-2 z)), z the tanh's argument (the same function: 0.5 (1 + tanh z) is
 * 1 / (1 + exp(-2 z))), 8 at a time (a row of 2048 31.4 -> 4.9 us a call, scalar tanhf before). */
void lp_geglu_row(const float *g, const float *u, int64_t n_ff, float *out) {
    const float c = 0.7978845608028654f;
    int64_t i = 0;
#if defined(LP_AVX2) || defined(LP_AVX512)
    const __m256 one = _mm256_set1_ps(1.0f), m2c = _mm256_set1_ps(-2.0f * c), k = _mm256_set1_ps(0.044715f);
    for (; i + 8 <= n_ff; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 t = _mm256_mul_ps(_mm256_mul_ps(m2c, x), _mm256_fmadd_ps(_mm256_mul_ps(k, x), x, one)); /* -2 z */
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, lp_exp8(t))), _mm256_loadu_ps(u + i)));
    }
#endif
    for (; i < n_ff; i++) {
        const float x = g[i];
        out[i] = 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x))) * u[i];
    }
}

/* RoPE in place on the n_head heads of one row, head h at x + h * d; c, s [n_rot/2].  neox:
 * pairs (i, i + n_rot/2), else (2i, 2i+1); dims past n_rot are left alone. */
void lp_rope_row(float *x, int64_t n_head, int64_t d, int64_t n_rot, const float *c, const float *s, int neox) {
    const int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_head; h++) {
        float *v = x + h * d;
        if (neox) {
#pragma omp simd
            for (int64_t i = 0; i < half; i++) {
                const float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * c[i] - x1 * s[i];
                v[i + half] = x0 * s[i] + x1 * c[i];
            }
        } else {
            for (int64_t i = 0; i < half; i++) {
                const float x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = x0 * c[i] - x1 * s[i];
                v[2 * i + 1] = x0 * s[i] + x1 * c[i];
            }
        }
    }
}

/* f32 -> f16, round to nearest even (torch's float16 conversion). */
void lp_store_f16(uint16_t *dst, const float *x, int64_t n) {
    int64_t j = 0;
#if defined(LP_AVX512)
    for (; j + 16 <= n; j += 16)
        _mm256_storeu_si256((__m256i *)(dst + j), _mm512_cvtps_ph(_mm512_loadu_ps(x + j), _MM_FROUND_TO_NEAREST_INT));
#elif defined(LP_AVX2)
    for (; j + 8 <= n; j += 8)
        _mm_storeu_si128((__m128i *)(dst + j), _mm256_cvtps_ph(_mm256_loadu_ps(x + j), _MM_FROUND_TO_NEAREST_INT));
#elif defined(LP_NEON)
    for (; j + 4 <= n; j += 4) vst1_f16((__fp16 *)(dst + j), vcvt_f16_f32(vld1q_f32(x + j)));
#endif
    for (; j < n; j++) {
        const _Float16 h = (_Float16)x[j];
        memcpy(dst + j, &h, 2);
    }
}
