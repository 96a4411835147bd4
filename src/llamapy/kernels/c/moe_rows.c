/* A multi-row ubatch's mixture-of-experts FFN (prefill: qwen3moe, Mixtral-style llama) in one call
 * and one parallel region -- llama.cpp's mul_mat_id idea for build_moe_ffn with SiLU experts, no
 * biases.  The routing comes from the caller (model/moe.py route, in torch): the n_tokens * k
 * slots grouped by expert (expert 0's slots first), slot s reading row rows[s] of x with weight
 * w[s]; counts[e] slots for expert e.  Then, with the threads taking (expert, 16 output rows)
 * tasks from one shared list so that both stay busy whatever the experts' row counts:
 *
 *   xg[s] = x[rows[s]]                                  (gathered, each expert's rows contiguous)
 *   g = wg_e xg, u = wu_e xg   (for each active expert e, over its slots)
 *   h = silu(g) * u (over g);  t = wd_e h (over xg, read by then)
 *   out[rows[s]] = sum over slots s of row r, in slot order, of t[s] * w[s];  y += out
 *
 * -- model/moe.py's per-expert loop (index_add_ in expert order, then y += out), with each
 * expert's products the same lp_mm products on the same rows.  Expert e's matrices start at
 * w + e * stride.  Seven barriers in all, whatever the number of experts (each expert's rows are
 * gathered, prepared and laid out in lanes by one thread).  Returns 0, or -1 when scratch memory
 * is short (y untouched). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "mm.h"
#include "ops.h"

#define ALIGN64(n) (((n) + 63) & ~(size_t)63)

typedef struct {
    int64_t e, s0, n; /* the expert, its first slot, its slot count */
    lp_xprep xe, xf;  /* its gathered rows, its SwiGLU rows, prepared for the products */
} active_expert;

/* Tasks t in [0, n_act * per): expert t / per's task t % per. */
static int64_t chunks(int64_t n_out) { return (n_out + LP_MM_CHUNK - 1) / LP_MM_CHUNK; }

static void rows_for(active_expert *a, int64_t n_act, int64_t n_out, int64_t n_in, int which, int type,
                     const uint8_t *w0, int64_t stride, float *y, void *scratch) {
    const int64_t per = chunks(n_out);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < n_act * per; t++) {
        const active_expert *ae = &a[t / per];
        const int64_t o0 = (t % per) * LP_MM_CHUNK, o1 = o0 + LP_MM_CHUNK < n_out ? o0 + LP_MM_CHUNK : n_out;
        lp_mm_chunk(type, w0 + ae->e * stride, o0, o1, n_out, n_in, which ? &ae->xf : &ae->xe, y + ae->s0 * n_out,
                    n_out, 0, scratch);
    }
}

/* The active experts' count and slot count of `counts`, and the bytes lp_moe_rows works in
 * (its experts' table, the rows it gathers and makes, their prepared forms); -1 on a negative
 * count. */
static int64_t layout(int64_t n_tokens, int64_t n_expert, const int64_t *counts, int64_t n_embd, int64_t n_ff,
                      int64_t *n_act, int64_t *n_slots) {
    size_t xbytes = 0;
    *n_act = *n_slots = 0;
    for (int64_t e = 0; e < n_expert; e++) {
        if (counts[e] < 0) return -1;
        if (counts[e] == 0) continue;
        ++*n_act;
        *n_slots += counts[e];
        xbytes += ALIGN64(lp_xprep_bytes(n_embd, counts[e])) + ALIGN64(lp_xprep_bytes(n_ff, counts[e])) + 128;
    }
    /* xg (then t) [n_slots, n_embd]; g (then h), u [n_slots, n_ff]; out [n_tokens, n_embd] */
    const size_t floats = (size_t)(*n_slots * (n_embd + 2 * n_ff) + n_tokens * n_embd);
    return (int64_t)(ALIGN64((size_t)(*n_act ? *n_act : 1) * sizeof(active_expert)) + ALIGN64(floats * sizeof(float)) +
                     xbytes + 64);
}

/* The bytes lp_moe_rows needs as `work` for these counts (-1: a negative count). */
int64_t lp_moe_rows_bytes(int64_t n_tokens, int64_t n_expert, const int64_t *counts, int64_t n_embd, int64_t n_ff) {
    int64_t n_act, n_slots;
    return layout(n_tokens, n_expert, counts, n_embd, n_ff, &n_act, &n_slots);
}

/* work: lp_moe_rows_bytes(...) bytes the caller keeps between calls (so that the pages are
 * not mapped and zeroed anew for every layer of every prompt), or NULL (allocated here). */
int lp_moe_rows(const float *x, int64_t n_tokens, int64_t n_expert, const int64_t *counts, const int64_t *rows,
                const float *w, const uint8_t *wg, const uint8_t *wu, const uint8_t *wd, int64_t tg, int64_t tu,
                int64_t td, int64_t sg, int64_t su, int64_t sd, int64_t n_embd, int64_t n_ff, float *y, void *work,
                int64_t work_bytes) {
    int64_t n_act, n_slots;
    const int64_t need = layout(n_tokens, n_expert, counts, n_embd, n_ff, &n_act, &n_slots);
    if (need < 0) return -2;
    for (int64_t s = 0; s < n_slots; s++)
        if (rows[s] < 0 || rows[s] >= n_tokens) return -2;
    const int64_t wide = n_embd > n_ff ? n_embd : n_ff;
    char *mine = work && work_bytes >= need ? NULL : (char *)malloc((size_t)need);
    if (!mine && !(work && work_bytes >= need)) return -1;
    char *base = (char *)ALIGN64((size_t)(mine ? mine : (char *)work));
    active_expert *a = (active_expert *)base;
    float *xg = (float *)(base + ALIGN64((size_t)(n_act ? n_act : 1) * sizeof(active_expert)));
    float *t = xg, *g = xg + n_slots * n_embd, *h = g, *u = g + n_slots * n_ff, *out = u + n_slots * n_ff;
    char *p = (char *)ALIGN64((size_t)(out + n_tokens * n_embd));
    for (int64_t e = 0, i = 0, s0 = 0; e < n_expert; s0 += counts[e], e++) {
        if (counts[e] == 0) continue;
        a[i].e = e;
        a[i].s0 = s0;
        a[i].n = counts[e];
        a[i].xe = lp_xprep_at(p, n_embd, counts[e], xg + s0 * n_embd);
        p += ALIGN64(lp_xprep_bytes(n_embd, counts[e])) + 64;
        a[i].xf = lp_xprep_at(p, n_ff, counts[e], h + s0 * n_ff);
        p += ALIGN64(lp_xprep_bytes(n_ff, counts[e])) + 64;
        i++;
    }
    int failed = 0;
#pragma omp parallel
    {
        void *scratch = malloc(lp_mm_scratch_bytes(wide));
#pragma omp atomic update
        failed += scratch == NULL;
#pragma omp barrier
        if (!failed) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t i = 0; i < n_act; i++) { /* gather and prepare each expert's rows (one thread each) */
                for (int64_t r = 0; r < a[i].n; r++) {
                    memcpy(xg + (a[i].s0 + r) * n_embd, x + rows[a[i].s0 + r] * n_embd, (size_t)n_embd * sizeof(float));
                    lp_prep_row(&a[i].xe, r);
                }
                lp_lanes_all(&a[i].xe);
            }
            rows_for(a, n_act, n_ff, n_embd, 0, (int)tg, wg, sg, g, scratch);
            rows_for(a, n_act, n_ff, n_embd, 0, (int)tu, wu, su, u, scratch);
#pragma omp for schedule(dynamic, 1)
            for (int64_t i = 0; i < n_act; i++) {
                for (int64_t r = 0; r < a[i].n; r++) {
                    const int64_t s = a[i].s0 + r;
                    lp_swiglu_row(g + s * n_ff, u + s * n_ff, n_ff, h + s * n_ff);
                    lp_prep_row(&a[i].xf, r);
                }
                lp_lanes_all(&a[i].xf);
            }
            rows_for(a, n_act, n_embd, n_ff, 1, (int)td, wd, sd, t, scratch);
#pragma omp for schedule(static)
            for (int64_t c0 = 0; c0 < n_embd; c0 += 64) { /* weighted scatter-add, slot order, by column blocks */
                const int64_t c1 = c0 + 64 < n_embd ? c0 + 64 : n_embd;
                for (int64_t r = 0; r < n_tokens; r++) memset(out + r * n_embd + c0, 0, (size_t)(c1 - c0) * sizeof(float));
                for (int64_t s = 0; s < n_slots; s++) {
                    float *o = out + rows[s] * n_embd;
                    for (int64_t c = c0; c < c1; c++) {
                        const float v = t[s * n_embd + c] * w[s];
                        o[c] += v;
                    }
                }
                for (int64_t r = 0; r < n_tokens; r++)
                    for (int64_t c = c0; c < c1; c++) y[r * n_embd + c] += out[r * n_embd + c];
            }
        }
        free(scratch);
    }
    free(mine);
    return failed ? -1 : 0;
}
