/* One row's mixture-of-experts FFN (decode: qwen3moe, Mixtral-style llama) in one call and one
 * parallel region -- llama.cpp's build_moe_ffn with softmax gating, norm_w, SiLU experts, no
 * biases:
 *
 *   logits = gate_inp x                      (the router, F32 [n_expert, n_embd]: the F32 product)
 *   p = softmax(logits); sel = the k largest p (largest first); w = p[sel] / max(sum p[sel], 2^-14)
 *   h_j = silu(wg_e x) * (wu_e x),  e = sel[j]   (all k experts' gate and up rows: one task list)
 *   y += sum over j in selection order of w_j * wd_e h_j   (all k experts' down rows, output row
 *                                                           chunks as tasks, summed in the task)
 *
 * Three barriers in all (after the router, after the gate / up products, at the end), as
 * ggml's mul_mat_id meets once per op: each thread prepares x and the h_j for the products itself
 * (a few microseconds, against a barrier each) and routes from the logits itself (the same
 * integers and floats on every thread, so the same choice), and the threads split (expert, 16
 * rows) tasks so that both stay busy whatever k, each thread reading its share of a matrix as one
 * stream, expert after expert (k interleaved streams of 16 rows each, as before, ran slower: on a
 * 2-core AMD EPYC Zen 3 at avx2, the qwen3-30b-a3b L8 shape's decode, -t 1, thread CPU time,
 * decode_ab.py: 1.02x the whole step, same logits).  Only the k selected experts' weights are read.
 * Expert e's matrices start at w + e * stride (the 3-D ffn_*_exps tensors, contiguous per
 * expert).  sel / wsel receive the routing (model/moe.py checks it in the tests).  The h_j are
 * read in ggml's Q8_K form by the K-quant down products whatever their largest value, as
 * llama.cpp rounds them (the outlier rule kept 97% of them in int16 on the qwen3-30b-a3b L8
 * shape: Zen 3 avx2, -t 1, thread CPU time, 1.04x the whole step; on tiny qwen3moe Q4_K_M files
 * from llama-quantize, KLD to llama.cpp 0.006-0.009 (0.030-0.037 with the rule), to the f32 path
 * 0.24-0.30 as llama.cpp's own 0.23-0.30; test_moe_row_q8k.py).  Returns 0, or -1 when scratch
 * memory is short (y untouched). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "mm.h"
#include "moe.h"
#include "ops.h"

#define LP_MOE_W_SUM_MIN 6.103515625e-5f /* build_moe_ffn's clamp of the weights' sum */
#define LP_TYPE_F32 0
#define ALIGN64(n) (((n) + 63) & ~(size_t)63)

/* p (n_expert floats of scratch) <- softmax(logits); sel, wsel <- the k largest, largest first
 * (the first on ties), renormalised. */
static void route(const float *logits, int64_t n_expert, int64_t k, float *p, int64_t *sel, float *wsel) {
    float mx = -INFINITY, sum = 0.0f, wsum = 0.0f;
    for (int64_t e = 0; e < n_expert; e++) mx = logits[e] > mx ? logits[e] : mx;
    for (int64_t e = 0; e < n_expert; e++) sum += (p[e] = expf(logits[e] - mx));
    for (int64_t e = 0; e < n_expert; e++) p[e] /= sum;
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
        wsel[j] = p[best];
        wsum += p[best];
    }
    wsum = wsum > LP_MOE_W_SUM_MIN ? wsum : LP_MOE_W_SUM_MIN;
    for (int64_t j = 0; j < k; j++) wsel[j] /= wsum;
}

/* One thread's memory: the product scratch, x (normed) and the k h rows prepared, the routing. */
typedef struct {
    void *scratch;
    lp_xprep xe, xf[LP_MOE_MAX_K];
    int64_t sel[LP_MOE_MAX_K];
    float w[LP_MOE_MAX_K];
    float *p, *g, *u, *t, *xn, *acc; /* n_expert, n_ff, n_ff, n_embd, n_embd, n_embd */
} own;

/* The first LP_MOE_HEAD bytes of a matrix asked for (the one-row kernels prefetch within a
 * matrix only: its first lines would come on demand). */
#define LP_MOE_HEAD 8192
static void prefetch_head(const uint8_t *w) {
    for (int64_t b = 0; b < LP_MOE_HEAD; b += 64) __builtin_prefetch(w + b, 0, 0);
}

static int64_t wide_of(const lp_moe *m) { return m->n_embd > m->n_ff ? m->n_embd : m->n_ff; }

/* A thread's bytes (lp_moe_row_for's `own`, 64-aligned), and the floats the threads share. */
size_t lp_moe_own_bytes(const lp_moe *m) {
    return ALIGN64(lp_mm_scratch_bytes(wide_of(m))) + ALIGN64(lp_xprep_bytes(m->n_embd, 1)) + 64 +
           (size_t)m->k * (ALIGN64(lp_xprep_bytes(m->n_ff, 1)) + 64) +
           (size_t)(m->n_expert + 2 * m->n_ff + 3 * m->n_embd + 64) * sizeof(float);
}
size_t lp_moe_shared_floats(const lp_moe *m) { return (size_t)(m->n_expert + m->k * m->n_ff); }

static own own_at(char *b, const lp_moe *m, const float *x, const float *h) {
    own o;
    o.scratch = b;
    b += ALIGN64(lp_mm_scratch_bytes(wide_of(m)));
    char *xb = b;
    b += ALIGN64(lp_xprep_bytes(m->n_embd, 1)) + 64;
    for (int64_t j = 0; j < m->k; j++, b += ALIGN64(lp_xprep_bytes(m->n_ff, 1)) + 64)
        o.xf[j] = lp_xprep_at(b, m->n_ff, 1, h + j * m->n_ff);
    o.p = (float *)b;
    o.g = o.p + m->n_expert;
    o.u = o.g + m->n_ff;
    o.t = o.u + m->n_ff;
    o.xn = o.t + m->n_embd;
    o.acc = o.xn + m->n_embd;
    o.xe = lp_xprep_at(xb, m->n_embd, 1, x ? x : o.xn);
    return o;
}

/* y[n_embd] += the MoE FFN of x (rms_norm(x) * norm when norm is not NULL), split among the
 * threads of the enclosing parallel region, which meet three times (the last at the end: y may
 * be x, and the caller's next step may read y).  shared: lp_moe_shared_floats(m) floats; own:
 * this thread's lp_moe_own_bytes(m) (64-aligned); sel, wsel (k each, or NULL): the routing. */
void lp_moe_row_for(const lp_moe *m, const float *x, const float *norm, float eps, float *y, float *shared, char *own_mem,
                    int64_t *sel, float *wsel) {
    const int64_t k = m->k, n_ff = m->n_ff, n_embd = m->n_embd;
    const int64_t per_f = (n_ff + LP_MM_CHUNK - 1) / LP_MM_CHUNK, per_e = (n_embd + LP_MM_CHUNK - 1) / LP_MM_CHUNK;
    float *logits = shared, *h = logits + m->n_expert;
    own o = own_at(own_mem, m, norm ? NULL : x, h);
    if (norm) lp_rms_norm_row(x, norm, n_embd, eps, o.xn);
    lp_prep_row(&o.xe, 0); /* one row: no lanes (lp_lanes_for has nothing to lay out) */
    lp_mm_for(LP_TYPE_F32, m->gate_inp, m->n_expert, n_embd, &o.xe, logits, m->n_expert, 0, o.scratch);
    route(logits, m->n_expert, k, o.p, o.sel, o.w);
    if (sel && omp_get_thread_num() == 0)
        for (int64_t j = 0; j < k; j++) sel[j] = o.sel[j], wsel[j] = o.w[j];
    /* Each thread's share of the (expert, 16 rows) gate / up tasks, as `omp for schedule(static)`
     * gave them: an expert's gate rows of the share as one stream, then its up rows, then their
     * SwiGLU (the same products as one gate and one up chunk in turn, which broke both streams
     * every 16 rows), the next matrix's head fetched while the last rows compute. */
    const int nth = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t t0 = k * per_f * tid / nth, t1 = k * per_f * (tid + 1) / nth;
    for (int64_t t = t0; t < t1;) {
        const int64_t j = t / per_f, e = o.sel[j], te = (j + 1) * per_f < t1 ? (j + 1) * per_f : t1;
        const int64_t f0 = (t % per_f) * LP_MM_CHUNK, f1 = (te - j * per_f) * LP_MM_CHUNK < n_ff ? (te - j * per_f) * LP_MM_CHUNK : n_ff;
        const uint8_t *wg = m->wg + e * m->sg, *wu = m->wu + e * m->su;
        for (int64_t o0 = f0; o0 < f1; o0 += LP_MM_CHUNK) {
            if (o0 + LP_MM_CHUNK >= f1) prefetch_head(wu + f0 * lp_row_bytes((int)m->tu, n_embd));
            lp_mm_chunk((int)m->tg, wg, o0, o0 + LP_MM_CHUNK < f1 ? o0 + LP_MM_CHUNK : f1, n_ff, n_embd, &o.xe, o.g, n_ff, 0, o.scratch);
        }
        for (int64_t o0 = f0; o0 < f1; o0 += LP_MM_CHUNK) {
            if (o0 + LP_MM_CHUNK >= f1 && te < t1) prefetch_head(m->wg + o.sel[j + 1] * m->sg);
            lp_mm_chunk((int)m->tu, wu, o0, o0 + LP_MM_CHUNK < f1 ? o0 + LP_MM_CHUNK : f1, n_ff, n_embd, &o.xe, o.u, n_ff, 0, o.scratch);
        }
        lp_swiglu_row(o.g + f0, o.u + f0, f1 - f0, h + j * n_ff + f0);
        t = te;
    }
#pragma omp barrier
    /* The SwiGLU rows in Q8_K whatever their largest value (the header; lp_prepare_q8k_row's
     * outlier rule was made for Gemma 3's hidden state). */
    for (int64_t j = 0; j < k; j++) {
        lp_prep_row(&o.xf[j], 0);
        lp_force_q8k_row(&o.xf[j], 0);
    }
    /* Each thread's share of the output rows (as `omp for schedule(static)` over 16-row chunks):
     * expert by expert, each expert's rows of the share one stream (a 16-row chunk of all k
     * experts in turn had kept k streams of 16 rows each), summed in selection order as before. */
    const int64_t e0 = per_e * tid / nth * LP_MM_CHUNK, e1r = per_e * (tid + 1) / nth * LP_MM_CHUNK;
    const int64_t e1 = e1r < n_embd ? e1r : n_embd;
    const int64_t rbd = lp_row_bytes((int)m->td, n_ff);
    for (int64_t j = 0; j < k; j++) {
        const uint8_t *wd = m->wd + o.sel[j] * m->sd;
        for (int64_t o0 = e0; o0 < e1; o0 += LP_MM_CHUNK) {
            const int64_t o1 = o0 + LP_MM_CHUNK < e1 ? o0 + LP_MM_CHUNK : e1;
            if (o1 == e1 && j + 1 < k) prefetch_head(m->wd + o.sel[j + 1] * m->sd + e0 * rbd);
            lp_mm_chunk((int)m->td, wd, o0, o1, n_embd, n_ff, &o.xf[j], o.t, n_embd, 0, o.scratch);
            for (int64_t i = o0; i < o1; i++) o.acc[i] = j == 0 ? o.t[i] * o.w[j] : o.acc[i] + o.t[i] * o.w[j];
        }
    }
    for (int64_t i = e0; i < e1; i++) y[i] += o.acc[i];
#pragma omp barrier
}

int lp_moe_row(const float *x, const uint8_t *gate_inp, int64_t n_expert, int64_t k, const uint8_t *wg,
               const uint8_t *wu, const uint8_t *wd, int64_t tg, int64_t tu, int64_t td, int64_t sg, int64_t su,
               int64_t sd, int64_t n_embd, int64_t n_ff, float *y, int64_t *sel, float *wsel) {
    if (k < 1 || k > LP_MOE_MAX_K || k > n_expert) return -2;
    const lp_moe m = {gate_inp, wg, wu, wd, n_expert, k, tg, tu, td, sg, su, sd, n_embd, n_ff};
    const int nth = omp_get_max_threads();
    const size_t ob = ALIGN64(lp_moe_own_bytes(&m));
    float *shared = (float *)malloc(lp_moe_shared_floats(&m) * sizeof(float));
    char *mine = (char *)malloc((size_t)nth * ob + 64);
    if (!shared || !mine) {
        free(shared);
        free(mine);
        return -1;
    }
#pragma omp parallel num_threads(nth)
    lp_moe_row_for(&m, x, NULL, 0.0f, y, shared, (char *)ALIGN64((size_t)mine) + (size_t)omp_get_thread_num() * ob, sel, wsel);
    free(shared);
    free(mine);
    return 0;
}
