/* q8mm_x86.c: see q8mm_x86.h.  A product: every activation row rounded to int8 (q8_prep_row),
 * then per panel of Q8MM_NP weight rows (threads take panels): the panel decoded once
 * (q8_pack), then Q8MM_MR activation rows at a time against it (q8_tile: int32 sums per group
 * of the weights' scale, 16 or 32 values, each turned into floats with the weights' scale times
 * the block's; the minima from the block's exact float sum), then the outlier blocks' residuals
 * (q8_fix). */
#include "q8mm_x86.h"

#include <math.h>

#include "amx_x86.h"
#include "q8mm32_x86.h"
#include "quants.h"
#include "unpack_x86.h"

/* The path on or off and the outlier ratio (set by the library's loader or a benchmark before
 * any product runs, as mm.c's coarse_bf16). */
static int q8_on = 1;
static float q8_ratio = LP_Q8MM_RATIO, q8_max_flagged = LP_Q8MM_MAX_FLAGGED;
void lp_q8mm_set(int on, float ratio, float max_flagged) {
    q8_on = on;
    q8_ratio = ratio;
    q8_max_flagged = max_flagged;
}
/* At load: off with LLAMAPY_Q8MM=0 (the int16 lanes for every prompt, an A/B switch); =all takes
 * every covered product whatever its outlier blocks (an accuracy probe). */
__attribute__((constructor)) static void q8mm_init(void) {
    const char *env = getenv("LLAMAPY_Q8MM");
    q8_on = !(env && env[0] == '0');
    if (env && strcmp(env, "all") == 0) q8_max_flagged = 1.0f;
}

int lp_q8mm_covers(int type, int64_t n_in, int64_t n_rows) {
#if defined(LP_Q8MM)
    /* (where AMX is on, its tiles keep the types of a scale per 32: tdpbssd outruns vpdpbusd) */
    if (lp_amx_on() && type != LP_Q6_K) return 0;
    /* (q8mm32_x86.c; not yet Q4_1 / Q5_1: their unsigned quants, 0..15 / 0..31, leave the rounding
     * errors' sum uncentred, 1.3-1.4% of the product on test_kernels' matrices against 0.5-0.65%
     * for the signed types -- so far taken by the lane products, which tests hold to 1e-4) */
    if (lp_q8mm32_type(type)) return q8_on && !lp_has_min(type) && n_rows >= LP_Q8MM_ROWS && n_in % 32 == 0;
    return q8_on && n_rows >= LP_Q8MM_ROWS && n_in % 256 == 0 && (type == LP_Q4_K || type == LP_Q5_K || type == LP_Q6_K);
#else
    (void)type, (void)n_in, (void)n_rows;
    return 0;
#endif
}

#if defined(LP_Q8MM)
/* The activation rows as the product reads them; g: the weights' scale group (16: Q6_K, 32). */
typedef struct {
    int64_t n, n_in, ng; /* rows, row length, groups a row (n_in / g) */
    int g, off;          /* group, the weights' offset (their bytes are q + off, unsigned) */
    int bits;            /* the weights' bits (4, 5, 6: q8mm_256.inc's int16 sums) */
    float ratio2;        /* the outlier rule's ratio squared; 0: no residuals (int8 alone) */
    int8_t *q, *rq;      /* [n, n_in] int8, and the residual where the block is flagged */
    float *s;            /* [n, n_in / 32] the block's scale (max |x| / 127) */
    float *sum;          /* [n, ng] the exact float sum of x over the group (the minima's factor) */
    int32_t *qo, *ro;    /* [n, ng] off x the sum of q (of rq) over the group */
    uint8_t *flag;       /* [n, n_in / 32] 1: the block's residual is in rq */
    int32_t *nflag;      /* [n] flagged blocks a row */
} q8x;

static size_t q8x_bytes(int64_t n_in, int64_t n) {
    return (size_t)n * ((size_t)n_in * 2 + (size_t)(n_in / 16) * 12 + (size_t)(n_in / 32) * 5 + 4) + 6 * 64;
}

static q8x q8x_at(void *buf, int64_t n_in, int64_t n, int g, int off) {
    q8x x = {.n = n, .n_in = n_in, .ng = n_in / g, .g = g, .off = off};
    char *p = (char *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    x.q = (int8_t *)p, p += n * n_in;
    x.rq = (int8_t *)p, p += n * n_in;
    x.s = (float *)p, p += n * (n_in / 32) * 4;
    x.sum = (float *)p, p += n * x.ng * 4;
    x.qo = (int32_t *)p, p += n * x.ng * 4;
    x.ro = (int32_t *)p, p += n * x.ng * 4;
    x.nflag = (int32_t *)p, p += n * 4;
    x.flag = (uint8_t *)p;
    return x;
}

/* A panel: q [n_in / 4][Q8MM_NP] dwords (4 values of a row, each q + off), d and m [ng][Q8MM_NP]
 * (the group's scale and minimum: lp_unpack_row16's d16, m16). */
typedef struct {
    uint8_t *q;
    float *d, *m;
} q8w;

#if defined(LP_VNNI)
#include "q8mm_512.inc"
#else
#include "q8mm_256.inc"
#endif

static size_t q8_scratch_bytes(int64_t n_in) {
    return (size_t)n_in * Q8MM_NP + 2 * (size_t)(n_in / 16) * Q8MM_NP * 4 + (size_t)n_in * 3 + (size_t)(n_in / 16) * 8 + 6 * 64;
}

/* Weight rows o .. o + np (np <= Q8MM_NP; the panel's rows past np zero) into the panel. */
static void q8_pack(int type, const uint8_t *w, int64_t o, int np, const q8x *x, void *scratch, q8w *p) {
    const int64_t n_in = x->n_in, rb = lp_row_bytes(type, n_in), n4 = n_in / 4;
    char *at = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    p->q = (uint8_t *)at, at += n_in * Q8MM_NP;
    p->d = (float *)at, at += (n_in / 16) * Q8MM_NP * 4;
    p->m = (float *)at, at += (n_in / 16) * Q8MM_NP * 4;
    int16_t *q16 = (int16_t *)(((uintptr_t)at + 63) & ~(uintptr_t)63);
    uint8_t *u8 = (uint8_t *)(q16 + n_in);
    float *d16 = (float *)(((uintptr_t)(u8 + n_in) + 63) & ~(uintptr_t)63), *m16 = d16 + n_in / 16;
    const int step = x->g / 16;
    uint32_t *pq = (uint32_t *)p->q;
    for (int j = 0; j < Q8MM_NP; j++) {
        if (j >= np) {
            for (int64_t k = 0; k < n4; k++) pq[k * Q8MM_NP + j] = 0;
            for (int64_t gi = 0; gi < x->ng; gi++) p->d[gi * Q8MM_NP + j] = p->m[gi * Q8MM_NP + j] = 0.0f;
            continue;
        }
        lp_unpack_row16(type, w + (o + j) * rb, n_in, q16, d16, m16);
        q8_to_u8(q16, n_in, x->off, u8);
        const uint32_t *u32 = (const uint32_t *)u8;
        for (int64_t k = 0; k < n4; k++) pq[k * Q8MM_NP + j] = u32[k];
        for (int64_t gi = 0; gi < x->ng; gi++) {
            p->d[gi * Q8MM_NP + j] = d16[gi * step];
            p->m[gi * Q8MM_NP + j] = m16[gi * step];
        }
    }
}
#endif

int lp_mm_q8(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *xf, int64_t n_rows, float *y,
             int64_t ldy, int accumulate, int residual) {
#if defined(LP_Q8MM)
    if (lp_q8mm32_type(type)) return lp_mm_q8_32(type, w, n_out, n_in, xf, n_rows, y, ldy, accumulate, residual);
    void *xbuf = malloc(q8x_bytes(n_in, n_rows));
    if (!xbuf) return -1;
    q8x x = q8x_at(xbuf, n_in, n_rows, type == LP_Q6_K ? 16 : 32, type == LP_Q6_K ? 32 : 0); /* (offset iff no minima) */
    x.bits = type == LP_Q4_K ? 4 : type == LP_Q5_K ? 5 : 6;
    x.ratio2 = residual ? q8_ratio * q8_ratio : 0.0f;
    const int has_min = lp_has_min(type);
    int failed = 0;
#pragma omp parallel
    {
        void *scratch = malloc(q8_scratch_bytes(n_in));
#pragma omp atomic update
        failed += scratch == NULL;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_rows; r++) q8_prep_row(xf + r * n_in, &x, r);
        /* (the loop's implied barrier: every thread's malloc counted; all skip the products together) */
        if (!failed) {
#pragma omp for schedule(static)
            for (int64_t o = 0; o < n_out; o += Q8MM_NP) {
                const int np = (int)(n_out - o < Q8MM_NP ? n_out - o : Q8MM_NP);
                q8w p;
                q8_pack(type, w, o, np, &x, scratch, &p);
                q8_panel(has_min, &x, &p, y + o, ldy, np, accumulate);
            }
        }
        free(scratch);
    }
    free(xbuf);
    return failed ? -1 : 0;
#else
    (void)type, (void)w, (void)n_out, (void)n_in, (void)xf, (void)n_rows, (void)y, (void)ldy, (void)accumulate;
    (void)residual;
    return -2;
#endif
}

/* Outlier blocks (the rule of q8_prep_row) among rows 0, step, 2 step ... of x. */
static int64_t q8_outliers(const float *x, int64_t n_in, int64_t n_rows, int64_t step) {
    const float ratio2 = q8_ratio * q8_ratio;
    int64_t nf = 0;
    if (ratio2 <= 0.0f) return 0;
    for (int64_t r = 0; r < n_rows; r += step)
        for (int64_t b = 0; b < n_in / 32; b++) {
#if defined(LP_VNNI)
            const __m512 x0 = _mm512_loadu_ps(x + r * n_in + 32 * b), x1 = _mm512_loadu_ps(x + r * n_in + 32 * b + 16);
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
            const float ss = _mm512_reduce_add_ps(_mm512_fmadd_ps(x0, x0, _mm512_mul_ps(x1, x1)));
#elif defined(LP_Q8MM)
            float amax, ss;
            q8_stats(x + r * n_in + 32 * b, &amax, &ss);
#else
            float amax = 0.0f, ss = 0.0f;
            for (int k = 0; k < 32; k++) {
                const float v = x[r * n_in + 32 * b + k];
                amax = fabsf(v) > amax ? fabsf(v) : amax;
                ss += v * v;
            }
#endif
            nf += amax > 0.0f && amax * amax * 32.0f > ratio2 * ss;
        }
    return nf;
}

int lp_q8mm_takes(int type, const float *x, int64_t n_in, int64_t n_rows) {
    if (!lp_q8mm_covers(type, n_in, n_rows)) return 0;
    if (lp_q8mm32_type(type)) return lp_q8mm32_takes(x, n_in, n_rows);
    const int64_t seen = (n_rows + 3) / 4 * (n_in / 32);
    /* else int8 alone: at the AVX2 level not the fp32 GEMM (2-3x slower), at the AVX512-VNNI
     * level not the int16 lanes (1.6x); still finer than ggml-cpu's Q8_K (q8mm_x86.h) */
    return (float)q8_outliers(x, n_in, n_rows, 4) <= q8_max_flagged * (float)seen ? 1 : 2;
}

double lp_q8mm_flagged(const float *x, int64_t n_in, int64_t n_rows) {
    return n_rows && n_in >= 32 ? (double)q8_outliers(x, n_in, n_rows, 1) / (double)(n_rows * (n_in / 32)) : 0.0;
}
