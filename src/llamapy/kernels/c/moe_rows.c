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
 * expert's products the same lp_mm products on the same rows (an expert's one row in the int16
 * lanes, not lp_mm's one-row Q8_0 form of row1_x86.h lp_row1_i8; at the AVX2 level, from
 * MOE_Q8_ROWS rows, lp_mm_q8's instead: below).  Expert e's matrices start at w + e * stride.
 * Six barriers in all, whatever the number of experts (each expert's rows are gathered,
 * prepared and laid out in lanes by one thread; gate and up one task list).  Returns 0, or -1 when scratch memory
 * is short (y untouched). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "amxw_x86.h"
#include "mm.h"
#include "ops.h"
#include "q8mm_x86.h"

#define ALIGN64(n) (((n) + 63) & ~(size_t)63)

/* At the AVX2 level an expert's K-quant products take the int8 tiles (q8mm_256.inc) from
 * MOE_Q8_ROWS rows (not LP_Q8MM_ROWS: its rows are one expert's, ~32 of a 512-row prompt): on
 * a Zen 4 (x86-64-v3 build, one thread, Q4_K 768 x 2048 / Q6_K 2048 x 768) 1.5x the int16
 * lanes at 32 rows, 1.4-1.8x at 9..15 (the fp32 tiles there), 1.15-1.5x at 4; at 2 rows the
 * panel's packing outweighs them.  Its rows then lie where the lanes' would (lp_q8x_bytes
 * under lp_xprep_bytes: the same working bytes), rounded straight from x, with the outlier rule
 * per expert (lp_q8x_settle: the residual pass or int8 alone, as lp_q8mm_takes for a dense
 * product's rows). */
#if defined(LP_Q8MM) && !defined(LP_VNNI)
#define MOE_Q8 1
#define MOE_Q8_ROWS 4
_Static_assert(LP_MM_CHUNK % LP_Q8MM_NP == 0, "a task's output rows are whole panels");
#endif

/* Where AMX is on (LP_AMX builds, Linux granted the tiles), an expert's rows that take the lanes
 * take amxw_x86.c's tiles instead from MOE_AMX_ROWS rows (the lanes' own bound): the same
 * integers and float steps, outputs bit for bit the lanes'.  On a 2-core Intel Xeon (KVM,
 * family 6 model 207) the qwen3-30b-a3b L8 shape's pp512, one process, the two alternating:
 * 1.33-1.39x less CPU time at 1-2 threads (docs/kernels.md). */
#if defined(LP_AMX)
#define MOE_AMX_ROWS 16
#endif
static int moe_amx = 1; /* 0: the lanes as before (lp_moe_rows_amx: A/B measurements, tests) */
__attribute__((constructor)) static void moe_amx_init(void) {
    const char *env = getenv("LLAMAPY_MOE_AMX");
    moe_amx = !(env && env[0] == '0');
}
int lp_moe_rows_amx(int on) {
    if (on >= 0) moe_amx = on;
    return moe_amx;
}

/* Do an expert's c rows of n_in take the AMX tiles in a product of this type? */
static int takes_amx(int type, int64_t n_in, int64_t c) {
#if defined(LP_AMX)
    return moe_amx && lp_amx_on() && c >= MOE_AMX_ROWS && lp_mm_takes_lanes(type, n_in, c);
#else
    (void)type, (void)n_in, (void)c;
    return 0;
#endif
}

typedef union {
    lp_xprep xp; /* the int16 lanes' (mm.c) */
    lp_q8x q8;   /* the int8 tiles' (MOE_Q8) */
} expert_rows;

typedef struct {
    int64_t e, s0, n;    /* the expert, its first slot, its slot count */
    expert_rows xe, xf;  /* its gathered rows, its SwiGLU rows, prepared for the products */
    int q8e, q8f;        /* 1: xe (xf) is q8, else xp */
    int amxe, amxf;      /* 1: xp's lanes turned into AMX's tiles (amxw_x86.c), its products there */
} active_expert;

/* Tasks t in [0, n_act * per): expert t / per's task t % per; with two (gate, up: the same rows)
 * tasks from n_act * per on the second's. */
static int64_t chunks(int64_t n_out) { return (n_out + LP_MM_CHUNK - 1) / LP_MM_CHUNK; }

static void rows_for(active_expert *a, int64_t n_act, int64_t n_out, int64_t n_in, int which, int two,
                     const int *type, const uint8_t *const *w0, const int64_t *stride, float *const *y, void *scratch) {
    const int64_t per = chunks(n_out);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < (1 + two) * n_act * per; t++) {
        const int m = t >= n_act * per; /* the second product */
        const active_expert *ae = &a[(t - m * n_act * per) / per];
        const int64_t o0 = (t % per) * LP_MM_CHUNK, o1 = o0 + LP_MM_CHUNK < n_out ? o0 + LP_MM_CHUNK : n_out;
        const uint8_t *w = w0[m] + ae->e * stride[m];
        float *ye = y[m] + ae->s0 * n_out;
#if defined(LP_AMX)
        if (which ? ae->amxf : ae->amxe) {
            lp_amxw_chunk(type[m], w, o0, o1, n_in, which ? &ae->xf.xp.xl : &ae->xe.xp.xl, ae->n, ye, n_out, 0, scratch);
            continue;
        }
#endif
#if defined(MOE_Q8)
        if (which ? ae->q8f : ae->q8e) {
            lp_q8mm_chunk(type[m], w, o0, o1, which ? &ae->xf.q8 : &ae->xe.q8, ye, n_out, 0, scratch);
            continue;
        }
#endif
        lp_mm_chunk(type[m], w, o0, o1, n_out, n_in, which ? &ae->xf.xp : &ae->xe.xp, ye, n_out, 0, scratch);
    }
}

/* Do an expert's c rows of n_in take the int8 tiles, in a region of `room` bytes? */
static int takes_q8(int ok, int64_t n_in, int64_t c, size_t room) {
#if defined(MOE_Q8)
    return ok && c >= MOE_Q8_ROWS && lp_q8x_bytes(n_in, c) <= room;
#else
    (void)ok, (void)n_in, (void)c, (void)room;
    return 0;
#endif
}

/* Expert i's rows rounded for the int8 tiles (row r: src + r's row), settled by the outlier rule. */
static void q8_rows(expert_rows *xr, const float *src, const int64_t *rows, int64_t n, int64_t n_in) {
#if defined(MOE_Q8)
    for (int64_t r = 0; r < n; r++) lp_q8x_row(&xr->q8, src + (rows ? rows[r] : r) * n_in, r);
    lp_q8x_settle(&xr->q8);
#else
    (void)xr, (void)src, (void)rows, (void)n, (void)n_in;
#endif
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
    const int q8_up = lp_q8mm_covers_type((int)tg, n_embd) && lp_q8mm_covers_type((int)tu, n_embd) &&
                      (tg == LP_Q6_K) == (tu == LP_Q6_K), /* (one rounding of the rows for both: the same group) */
        q8_down = lp_q8mm_covers_type((int)td, n_ff);
    for (int64_t e = 0, i = 0, s0 = 0; e < n_expert; s0 += counts[e], e++) {
        if (counts[e] == 0) continue;
        const int64_t c = counts[e];
        const size_t re = ALIGN64(lp_xprep_bytes(n_embd, c)) + 64, rf = ALIGN64(lp_xprep_bytes(n_ff, c)) + 64;
        a[i].e = e;
        a[i].s0 = s0;
        a[i].n = c;
        a[i].q8e = takes_q8(q8_up, n_embd, c, re);
        a[i].q8f = takes_q8(q8_down, n_ff, c, rf);
        a[i].amxe = !a[i].q8e && takes_amx((int)tg, n_embd, c) && takes_amx((int)tu, n_embd, c);
        a[i].amxf = !a[i].q8f && takes_amx((int)td, n_ff, c);
#if defined(MOE_Q8)
        if (a[i].q8e) a[i].xe.q8 = lp_q8x_at(p, (int)tg, n_embd, c);
        if (a[i].q8f) a[i].xf.q8 = lp_q8x_at(p + re, (int)td, n_ff, c);
#endif
        if (!a[i].q8e) a[i].xe.xp = lp_xprep_at(p, n_embd, c, xg + s0 * n_embd);
        if (!a[i].q8f) a[i].xf.xp = lp_xprep_at(p + re, n_ff, c, h + s0 * n_ff);
        p += re + rf;
        i++;
    }
    int failed = 0;
#pragma omp parallel
    {
#if defined(MOE_Q8)
        const size_t sb = lp_mm_scratch_bytes(wide), qb = lp_q8mm_scratch_bytes(wide);
        void *scratch = malloc(sb > qb ? sb : qb);
#else
        void *scratch = malloc(lp_mm_scratch_bytes(wide));
#endif
#pragma omp atomic update
        failed += scratch == NULL;
#pragma omp barrier
        if (!failed) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t i = 0; i < n_act; i++) { /* gather and prepare each expert's rows (one thread each) */
                if (a[i].q8e) {
                    q8_rows(&a[i].xe, x, rows + a[i].s0, a[i].n, n_embd);
                    continue;
                }
                for (int64_t r = 0; r < a[i].n; r++) {
                    memcpy(xg + (a[i].s0 + r) * n_embd, x + rows[a[i].s0 + r] * n_embd, (size_t)n_embd * sizeof(float));
                    lp_prep_row(&a[i].xe.xp, r);
                }
                lp_lanes_all(&a[i].xe.xp);
#if defined(LP_AMX)
                if (a[i].amxe) lp_amxw_lanes(&a[i].xe.xp.xl);
#endif
            }
            rows_for(a, n_act, n_ff, n_embd, 0, 1, (const int[]){(int)tg, (int)tu}, (const uint8_t *const[]){wg, wu},
                     (const int64_t[]){sg, su}, (float *const[]){g, u}, scratch);
#pragma omp for schedule(dynamic, 1)
            for (int64_t i = 0; i < n_act; i++) {
                for (int64_t r = 0; r < a[i].n; r++) {
                    const int64_t s = a[i].s0 + r;
                    lp_swiglu_row(g + s * n_ff, u + s * n_ff, n_ff, h + s * n_ff);
                    if (!a[i].q8f) lp_prep_row(&a[i].xf.xp, r);
                }
                if (a[i].q8f) q8_rows(&a[i].xf, h + a[i].s0 * n_ff, NULL, a[i].n, n_ff);
                else {
                    lp_lanes_all(&a[i].xf.xp);
#if defined(LP_AMX)
                    if (a[i].amxf) lp_amxw_lanes(&a[i].xf.xp.xl);
#endif
                }
            }
            rows_for(a, n_act, n_embd, n_ff, 1, 0, (const int[]){(int)td}, (const uint8_t *const[]){wd},
                     (const int64_t[]){sd}, (float *const[]){t}, scratch);
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
