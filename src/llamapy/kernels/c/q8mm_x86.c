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
    if (lp_q8mm32_type(type)) return q8_on && n_rows >= LP_Q8MM_ROWS && n_in % 32 == 0; /* (q8mm32_x86.c) */
    return q8_on && n_rows >= LP_Q8MM_ROWS && n_in % 256 == 0 && (type == LP_Q4_K || type == LP_Q5_K || type == LP_Q6_K);
#else
    (void)type, (void)n_in, (void)n_rows;
    return 0;
#endif
}

#if defined(LP_Q8MM)
#define Q8MM_NP 32 /* weight rows a panel: two zmm of 16 rows x 4 bytes a step of 4 values */
#define Q8MM_MR 6  /* activation rows a tile: 2 x 6 int32 and 2 x 6 float accumulators */

/* The activation rows as the product reads them; g: the weights' scale group (16: Q6_K, 32). */
typedef struct {
    int64_t n, n_in, ng; /* rows, row length, groups a row (n_in / g) */
    int g, off;          /* group, the weights' offset (their bytes are q + off, unsigned) */
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

/* Row r of x rounded: per block of 32, s = max |x| / 127, q = round(x / s); a block whose max
 * exceeds q8_ratio x its rms keeps the residual x - q s as round((x - q s) / (s / 254)). */
static void q8_prep_row(const float *xr, q8x *x, int64_t r) {
    const int64_t nb = x->n_in / 32;
    int8_t *q = x->q + r * x->n_in, *rq = x->rq + r * x->n_in;
    float *s = x->s + r * nb, *sum = x->sum + r * x->ng;
    int32_t *qo = x->qo + r * x->ng, *ro = x->ro + r * x->ng;
    uint8_t *flag = x->flag + r * nb;
    const float ratio2 = q8_ratio * q8_ratio;
    int32_t nf = 0;
    for (int64_t b = 0; b < nb; b++) {
        const __m512 x0 = _mm512_loadu_ps(xr + 32 * b), x1 = _mm512_loadu_ps(xr + 32 * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const float ss = _mm512_reduce_add_ps(_mm512_fmadd_ps(x0, x0, _mm512_mul_ps(x1, x1)));
        const float sb = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, _mm512_set1_ps(inv)));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, _mm512_set1_ps(inv)));
        _mm512_mask_cvtsepi32_storeu_epi8(q + 32 * b, 0xffff, q0);
        _mm512_mask_cvtsepi32_storeu_epi8(q + 32 * b + 16, 0xffff, q1);
        s[b] = sb;
        const float f0 = _mm512_reduce_add_ps(x0), f1 = _mm512_reduce_add_ps(x1);
        const int32_t i0 = _mm512_reduce_add_epi32(q0), i1 = _mm512_reduce_add_epi32(q1);
        const int fl = ratio2 > 0.0f && amax > 0.0f && amax * amax * 32.0f > ratio2 * ss;
        flag[b] = (uint8_t)fl;
        int32_t j0 = 0, j1 = 0;
        if (fl) {
            nf++;
            const __m512 sv = _mm512_set1_ps(sb), rinv = _mm512_set1_ps(254.0f * inv);
            const __m512i r0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_fnmadd_ps(_mm512_cvtepi32_ps(q0), sv, x0), rinv));
            const __m512i r1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_fnmadd_ps(_mm512_cvtepi32_ps(q1), sv, x1), rinv));
            const __m512i lim = _mm512_set1_epi32(127);
            const __m512i c0 = _mm512_max_epi32(_mm512_min_epi32(r0, lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
            const __m512i c1 = _mm512_max_epi32(_mm512_min_epi32(r1, lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
            _mm512_mask_cvtsepi32_storeu_epi8(rq + 32 * b, 0xffff, c0);
            _mm512_mask_cvtsepi32_storeu_epi8(rq + 32 * b + 16, 0xffff, c1);
            j0 = _mm512_reduce_add_epi32(c0), j1 = _mm512_reduce_add_epi32(c1);
        }
        if (x->g == 16) {
            sum[2 * b] = f0, sum[2 * b + 1] = f1;
            qo[2 * b] = x->off * i0, qo[2 * b + 1] = x->off * i1;
            ro[2 * b] = x->off * j0, ro[2 * b + 1] = x->off * j1;
        } else {
            sum[b] = f0 + f1;
            qo[b] = x->off * (i0 + i1);
            ro[b] = x->off * (j0 + j1);
        }
    }
    x->nflag[r] = nf;
}

/* A panel: q [n_in / 4][Q8MM_NP] dwords (4 values of a row, each q + off), d and m [ng][Q8MM_NP]
 * (the group's scale and minimum: lp_unpack_row16's d16, m16). */
typedef struct {
    uint8_t *q;
    float *d, *m;
} q8w;

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
        const __m512i off = _mm512_set1_epi16((short)x->off);
        for (int64_t k = 0; k < n_in; k += 32)
            _mm256_storeu_si256((__m256i *)(u8 + k), _mm512_cvtepi16_epi8(_mm512_add_epi16(_mm512_loadu_si512(q16 + k), off)));
        const uint32_t *u32 = (const uint32_t *)u8;
        for (int64_t k = 0; k < n4; k++) pq[k * Q8MM_NP + j] = u32[k];
        for (int64_t gi = 0; gi < x->ng; gi++) {
            p->d[gi * Q8MM_NP + j] = d16[gi * step];
            p->m[gi * Q8MM_NP + j] = m16[gi * step];
        }
    }
}

LP_INLINE void q8_store(float *y, __m512 v, __mmask16 k, int accumulate) {
    if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, y));
    _mm512_mask_storeu_ps(y, k, v);
}

/* Activation rows m0 .. m0 + mr against the panel: y[m0 + i, 0 .. nc) (+)= the products. */
LP_INLINE void q8_tile(const int mr, const int has_min, const q8x *x, int64_t m0, const q8w *p, float *y, int64_t ldy,
                       int nc, int accumulate) {
    const int64_t n_in = x->n_in, ng = x->ng, nb = n_in / 32;
    const int steps = x->g / 4;
    __m512 f[Q8MM_MR][2];
    for (int i = 0; i < mr; i++) f[i][0] = f[i][1] = _mm512_setzero_ps();
    const int8_t *xq = x->q + m0 * n_in;
    for (int64_t gi = 0; gi < ng; gi++) {
        __m512i a[Q8MM_MR][2];
        for (int i = 0; i < mr; i++) a[i][0] = a[i][1] = _mm512_setzero_si512();
        const uint32_t *wq = (const uint32_t *)p->q + gi * steps * Q8MM_NP;
        const int8_t *xg = xq + gi * x->g;
        for (int t = 0; t < steps; t++) {
            const __m512i w0 = _mm512_load_si512(wq + t * Q8MM_NP), w1 = _mm512_load_si512(wq + t * Q8MM_NP + 16);
            for (int i = 0; i < mr; i++) {
                const __m512i xb = _mm512_set1_epi32(*(const int32_t *)(xg + i * n_in + 4 * t));
                a[i][0] = _mm512_dpbusd_epi32(a[i][0], w0, xb);
                a[i][1] = _mm512_dpbusd_epi32(a[i][1], w1, xb);
            }
        }
        const __m512 d0 = _mm512_load_ps(p->d + gi * Q8MM_NP), d1 = _mm512_load_ps(p->d + gi * Q8MM_NP + 16);
        const int64_t b = gi * x->g / 32;
        for (int i = 0; i < mr; i++) {
            if (!has_min) { /* the types without minima (Q6_K) are the ones with an offset */
                const __m512i o = _mm512_set1_epi32(x->qo[(m0 + i) * ng + gi]);
                a[i][0] = _mm512_sub_epi32(a[i][0], o);
                a[i][1] = _mm512_sub_epi32(a[i][1], o);
            }
            const __m512 s = _mm512_set1_ps(x->s[(m0 + i) * nb + b]);
            f[i][0] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a[i][0]), s), d0, f[i][0]);
            f[i][1] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a[i][1]), s), d1, f[i][1]);
        }
        if (has_min) {
            const __m512 n0 = _mm512_load_ps(p->m + gi * Q8MM_NP), n1 = _mm512_load_ps(p->m + gi * Q8MM_NP + 16);
            for (int i = 0; i < mr; i++) {
                const __m512 sm = _mm512_set1_ps(x->sum[(m0 + i) * ng + gi]);
                f[i][0] = _mm512_fmadd_ps(sm, n0, f[i][0]);
                f[i][1] = _mm512_fmadd_ps(sm, n1, f[i][1]);
            }
        }
    }
    const __mmask16 k0 = nc >= 16 ? 0xffff : (__mmask16)((1u << nc) - 1);
    const __mmask16 k1 = nc >= 32 ? 0xffff : nc <= 16 ? 0 : (__mmask16)((1u << (nc - 16)) - 1);
    for (int i = 0; i < mr; i++) {
        q8_store(y + (m0 + i) * ldy, f[i][0], k0, accumulate);
        q8_store(y + (m0 + i) * ldy + 16, f[i][1], k1, accumulate);
    }
}

/* Row r's flagged blocks: their residuals' products added to y[r, 0 .. nc). */
static void q8_fix(const q8x *x, int64_t r, const q8w *p, float *yr, int nc) {
    const int64_t n_in = x->n_in, nb = n_in / 32;
    const int gb = 32 / x->g; /* groups a block */
    __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (!x->flag[r * nb + b]) continue;
        const __m512 rs = _mm512_set1_ps(x->s[r * nb + b] / 254.0f);
        for (int h = 0; h < gb; h++) {
            const int64_t gi = b * gb + h;
            const uint32_t *wq = (const uint32_t *)p->q + gi * (x->g / 4) * Q8MM_NP;
            const int8_t *xg = x->rq + r * n_in + gi * x->g;
            __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
            for (int t = 0; t < x->g / 4; t++) {
                const __m512i xb = _mm512_set1_epi32(*(const int32_t *)(xg + 4 * t));
                a0 = _mm512_dpbusd_epi32(a0, _mm512_load_si512(wq + t * Q8MM_NP), xb);
                a1 = _mm512_dpbusd_epi32(a1, _mm512_load_si512(wq + t * Q8MM_NP + 16), xb);
            }
            const __m512i o = _mm512_set1_epi32(x->ro[r * x->ng + gi]);
            c0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a0, o)), rs), _mm512_load_ps(p->d + gi * Q8MM_NP), c0);
            c1 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a1, o)), rs),
                                 _mm512_load_ps(p->d + gi * Q8MM_NP + 16), c1);
        }
    }
    const __mmask16 k0 = nc >= 16 ? 0xffff : (__mmask16)((1u << nc) - 1);
    const __mmask16 k1 = nc >= 32 ? 0xffff : nc <= 16 ? 0 : (__mmask16)((1u << (nc - 16)) - 1);
    q8_store(yr, c0, k0, 1);
    q8_store(yr + 16, c1, k1, 1);
}

/* Every activation row against one packed panel: Q8MM_MR rows a tile, the last tile its own size. */
static void q8_panel(int has_min, const q8x *x, const q8w *p, float *y, int64_t ldy, int nc, int accumulate) {
    int64_t m0 = 0;
    for (; m0 + Q8MM_MR <= x->n; m0 += Q8MM_MR)
        if (has_min) q8_tile(Q8MM_MR, 1, x, m0, p, y, ldy, nc, accumulate);
        else q8_tile(Q8MM_MR, 0, x, m0, p, y, ldy, nc, accumulate);
    switch ((int)(x->n - m0)) {
#define Q8_LAST(k)                                                                 \
    case k:                                                                        \
        if (has_min) q8_tile(k, 1, x, m0, p, y, ldy, nc, accumulate);              \
        else q8_tile(k, 0, x, m0, p, y, ldy, nc, accumulate);                      \
        break;
        Q8_LAST(1) Q8_LAST(2) Q8_LAST(3) Q8_LAST(4) Q8_LAST(5)
#undef Q8_LAST
    default: break;
    }
    for (int64_t r = 0; r < x->n; r++)
        if (x->nflag[r]) q8_fix(x, r, p, y + r * ldy, nc);
}
#endif

int lp_mm_q8(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *xf, int64_t n_rows, float *y,
             int64_t ldy, int accumulate) {
#if defined(LP_Q8MM)
    if (lp_q8mm32_type(type)) return lp_mm_q8_32(type, w, n_out, n_in, xf, n_rows, y, ldy, accumulate, q8_ratio);
    void *xbuf = malloc(q8x_bytes(n_in, n_rows));
    if (!xbuf) return -1;
    q8x x = q8x_at(xbuf, n_in, n_rows, type == LP_Q6_K ? 16 : 32, type == LP_Q6_K ? 32 : 0); /* (offset iff no minima) */
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
#if defined(LP_Q8MM)
            const __m512 x0 = _mm512_loadu_ps(x + r * n_in + 32 * b), x1 = _mm512_loadu_ps(x + r * n_in + 32 * b + 16);
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
            const float ss = _mm512_reduce_add_ps(_mm512_fmadd_ps(x0, x0, _mm512_mul_ps(x1, x1)));
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
    if (lp_q8mm32_type(type)) return lp_q8mm32_takes(x, n_in, n_rows, q8_ratio);
    const int64_t seen = (n_rows + 3) / 4 * (n_in / 32);
    return (float)q8_outliers(x, n_in, n_rows, 4) <= q8_max_flagged * (float)seen;
}

double lp_q8mm_flagged(const float *x, int64_t n_in, int64_t n_rows) {
    return n_rows && n_in >= 32 ? (double)q8_outliers(x, n_in, n_rows, 1) / (double)(n_rows * (n_in / 32)) : 0.0;
}
