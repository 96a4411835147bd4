/* The attention's chunk merge and gpt-oss's sink share (attn.c's tasks' partials into a row's output). */
#include "attn_merge.h"

/* out (d_v floats) = the chunks' outputs o_c merged: sum_c w_c o_c / (sum_c w_c + w_sink),
 * w_c = s_c exp(m_c - M), M the largest m_c (and sink), w_sink = exp(sink - M) (gpt-oss's
 * per-head sink logit, ggml_soft_max_add_sinks; -inf: none); each o_c is its chunk's
 * softmax-weighted mean; zeros if nothing was seen.  o: the first chunk's output, the next ones
 * `step` floats apart; ms likewise (stride mstep). */
void lp_attn_merge(const float *o, int64_t step, const float *ms, int64_t mstep, int64_t n_chunk, int64_t d_v, float sink,
                   float *out) {
    float m = -INFINITY, w_sum = 0.0f;
    for (int64_t c = 0; c < n_chunk; c++) m = ms[c * mstep] > m ? ms[c * mstep] : m;
    memset(out, 0, (size_t)d_v * sizeof(float));
    if (m == -INFINITY) return;
    m = sink > m ? sink : m;
    for (int64_t c = 0; c < n_chunk; c++) {
        if (ms[c * mstep] == -INFINITY) continue;
        const float w = ms[c * mstep + 1] * expf(ms[c * mstep] - m), *oc = o + c * step;
        w_sum += w;
#pragma omp simd
        for (int64_t j = 0; j < d_v; j++) out[j] += w * oc[j];
    }
    const float inv = 1.0f / (w_sum + (sink == -INFINITY ? 0.0f : expf(sink - m)));
#pragma omp simd
    for (int64_t j = 0; j < d_v; j++) out[j] *= inv;
}

/* The sink's share taken from hpt heads' outputs o (each d_v, its softmax's max and sum in
 * ms [hpt, 2]): o_h *= w / (w + exp(sink_h - M)), w = s_h exp(m_h - M), M = max(m_h, sink_h) --
 * lp_attn_merge's weights for one chunk. */
void lp_attn_sink_scale(float *o, int64_t hpt, int64_t d_v, const float *ms, const float *sinks) {
    for (int64_t h = 0; h < hpt; h++) {
        const float m = ms[2 * h], s = ms[2 * h + 1], sk = sinks[h];
        if (m == -INFINITY) continue; /* nothing seen: zeros already */
        const float mm = sk > m ? sk : m, w = s * expf(m - mm), f = w / (w + expf(sk - mm));
#pragma omp simd
        for (int64_t j = 0; j < d_v; j++) o[h * d_v + j] *= f;
    }
}
