/* One row's mixture-of-experts FFN (decode: qwen3moe, Mixtral-style llama) in one call and one
 * parallel region -- llama.cpp's build_moe_ffn with softmax gating, norm_w, SiLU experts, no biases:
 *
 *   logits = gate_inp x                      (the router, F32 [n_expert, n_embd]: the F32 product)
 *   p = softmax(logits); sel = the k largest p (largest first); w = p[sel] / max(sum p[sel], 2^-14)
 *   acc = sum over j in selection order of w_j * wd_e (silu(wg_e x) * (wu_e x)),  e = sel[j]
 *   y += acc
 *
 * x is prepared for the products once (the router's and every expert's gate and up read it); only
 * the k selected experts' weights are read.  Expert e's matrices start at w + e * stride (the
 * 3-D ffn_*_exps tensors, contiguous per expert).  sel / wsel receive the routing (model/moe.py
 * checks it in the tests).  Returns 0, or -1 when scratch memory is short. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "mm.h"
#include "ops.h"

#define LP_MOE_MAX_K 64
#define LP_MOE_W_SUM_MIN 6.103515625e-5f /* build_moe_ffn's clamp of the weights' sum */
#define LP_TYPE_F32 0

static void route(const float *logits, int64_t n_expert, int64_t k, int64_t *sel, float *wsel) {
    float mx = -INFINITY, sum = 0.0f, wsum = 0.0f;
    for (int64_t e = 0; e < n_expert; e++) mx = logits[e] > mx ? logits[e] : mx;
    float *p = (float *)malloc((size_t)n_expert * sizeof(float));
    for (int64_t e = 0; e < n_expert; e++) sum += (p[e] = expf(logits[e] - mx));
    for (int64_t e = 0; e < n_expert; e++) p[e] /= sum;
    for (int64_t j = 0; j < k; j++) { /* the k largest, largest first (the first on ties) */
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
    free(p);
}

int lp_moe_row(const float *x, const uint8_t *gate_inp, int64_t n_expert, int64_t k, const uint8_t *wg,
               const uint8_t *wu, const uint8_t *wd, int64_t tg, int64_t tu, int64_t td, int64_t sg, int64_t su,
               int64_t sd, int64_t n_embd, int64_t n_ff, float *y, int64_t *sel, float *wsel) {
    if (k < 1 || k > LP_MOE_MAX_K || k > n_expert) return -2;
    const int64_t wide = n_embd > n_ff ? n_embd : n_ff;
    float *buf = (float *)malloc((size_t)(n_expert + 3 * n_ff + 2 * n_embd) * sizeof(float));
    void *xb_e = malloc(lp_xprep_bytes(n_embd, 1)), *xb_f = malloc(lp_xprep_bytes(n_ff, 1));
    if (!buf || !xb_e || !xb_f) {
        free(buf);
        free(xb_e);
        free(xb_f);
        return -1;
    }
    float *logits = buf, *g = logits + n_expert, *u = g + n_ff, *h = u + n_ff, *t = h + n_ff, *acc = t + n_embd;
    lp_xprep xp_e = lp_xprep_at(xb_e, n_embd, 1, x), xp_f = lp_xprep_at(xb_f, n_ff, 1, h);
    int failed = 0;
#pragma omp parallel
    {
        void *scratch = malloc(lp_mm_scratch_bytes(wide));
#pragma omp atomic update
        failed += scratch == NULL;
#pragma omp barrier
        if (!failed) {
#pragma omp for schedule(static)
            for (int64_t r = 0; r < 1; r++) lp_prep_row(&xp_e, r);
            lp_lanes_for(&xp_e);
            lp_mm_for(LP_TYPE_F32, gate_inp, n_expert, n_embd, &xp_e, logits, n_expert, 0, scratch);
#pragma omp single
            route(logits, n_expert, k, sel, wsel);
            for (int64_t j = 0; j < k; j++) {
                const int64_t e = sel[j];
                lp_mm_for((int)tg, wg + e * sg, n_ff, n_embd, &xp_e, g, n_ff, 0, scratch);
                lp_mm_for((int)tu, wu + e * su, n_ff, n_embd, &xp_e, u, n_ff, 0, scratch);
#pragma omp for schedule(static)
                for (int64_t r = 0; r < 1; r++) {
                    lp_swiglu_row(g, u, n_ff, h);
                    lp_prep_row(&xp_f, r);
                }
                lp_lanes_for(&xp_f);
                lp_mm_for((int)td, wd + e * sd, n_embd, n_ff, &xp_f, t, n_embd, 0, scratch);
#pragma omp for schedule(static)
                for (int64_t i = 0; i < n_embd; i++) acc[i] = j == 0 ? t[i] * wsel[j] : acc[i] + t[i] * wsel[j];
            }
#pragma omp for schedule(static)
            for (int64_t i = 0; i < n_embd; i++) y[i] += acc[i];
        }
        free(scratch);
    }
    free(buf);
    free(xb_e);
    free(xb_f);
    return failed ? -1 : 0;
}
