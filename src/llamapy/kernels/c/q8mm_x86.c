/* q8mm_x86.c: see q8mm_x86.h.  A product: every activation row rounded to int8 (q8_prep_row),
 * then per panel of Q8MM_NP weight rows (threads take panels): the panel decoded once
 * (q8_pack), then Q8MM_MR activation rows at a time against it (q8_tile: int32 sums per group
 * of the weights' scale, 16 or 32 values, each turned into floats with the weights' scale times
 * the block's; the minima from the block's exact float sum), then the outlier blocks' residuals
 * (q8_fix). */
#include "q8mm_x86.h"

#include <math.h>

#include "amx_x86.h"
#include "amxk_x86.h"
#include "det_panel_x86.h"
#include "q8mm32_x86.h"
#include "q8p_x86.h"
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

int lp_q8mm_covers_type(int type, int64_t n_in) {
#if defined(LP_Q8MM)
    /* (where AMX is on, its tiles keep the types of a scale per 32: tdpbssd outruns vpdpbusd) */
    if (lp_amx_on() && type != LP_Q6_K) return 0;
    return q8_on && n_in % 256 == 0 && (type == LP_Q4_K || type == LP_Q5_K || type == LP_Q6_K);
#else
    (void)type, (void)n_in;
    return 0;
#endif
}

int lp_q8mm_covers(int type, int64_t n_in, int64_t n_rows) {
    if (n_rows < LP_Q8MM_ROWS) return 0;
#if defined(LP_Q8MM)
    /* (q8mm32_x86.c; not yet Q4_1 / Q5_1: their unsigned quants, 0..15 / 0..31, leave the rounding
     * errors' sum uncentred, 1.3-1.4% of the product on test_kernels' matrices against 0.5-0.65%
     * for the signed types -- so far taken by the lane products, which tests hold to 1e-4; where
     * AMX is on, its tiles keep the types of a scale per 32) */
    if (lp_q8mm32_type(type)) return q8_on && !lp_amx_on() && !lp_has_min(type) && n_in % 32 == 0;
#endif
    if (n_rows >= LP_DENSE_ROWS && lp_amxk_covers(type, n_in)) return 0; /* (Q6_K prompts on AMX: amxk_x86.c) */
    return lp_q8mm_covers_type(type, n_in);
}

#if defined(LP_Q8MM)
typedef lp_q8x q8x;

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
_Static_assert(Q8MM_NP == LP_Q8MM_NP, "q8mm_x86.h's panel rows are the included products'");

/* The panel, then the 8 (AVX2) or 16 rows' bytes side by side, an int16 row, the row's scales. */
static size_t q8_scratch_bytes(int64_t n_in) {
    const size_t rows8 = (Q8MM_NP == 8 ? 8 : 16) * (size_t)n_in; /* (Q8MM_NP 32: a half panel's rows at a time) */
    return (size_t)n_in * Q8MM_NP + 2 * (size_t)(n_in / 16) * Q8MM_NP * 4 + rows8 + (size_t)n_in * 2 + (size_t)(n_in / 16) * 8 +
           6 * 64;
}

#if Q8MM_NP == 32
/* Dwords k .. k + 15 of the 16 byte rows u8 + j n_in (j < 16) to pq[(k + i) 32 + j]: a 16 x 16
 * dword transpose (the panel's half of 16 rows; the dword-by-dword copy was 1024 scalar stores a
 * row of 4096). */
LP_INLINE void q8_transpose16(const uint8_t *u8, int64_t n_in, int64_t k, uint32_t *pq) {
    __m512i r[16], t[16];
    for (int j = 0; j < 16; j++) r[j] = _mm512_loadu_si512(u8 + j * n_in + 4 * k);
    for (int j = 0; j < 16; j += 2) {
        t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) { /* r[j + c]: a lane L's rows j .. j + 3, dword 4 L + c */
        r[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
        r[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
        r[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
        r[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), v1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
        const __m512i w0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88), w1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
        _mm512_store_si512(pq + (k + c) * 32, _mm512_shuffle_i32x4(v0, w0, 0x88));
        _mm512_store_si512(pq + (k + 8 + c) * 32, _mm512_shuffle_i32x4(v0, w0, 0xdd));
        _mm512_store_si512(pq + (k + 4 + c) * 32, _mm512_shuffle_i32x4(v1, w1, 0x88));
        _mm512_store_si512(pq + (k + 12 + c) * 32, _mm512_shuffle_i32x4(v1, w1, 0xdd));
    }
}
#endif

#if Q8MM_NP == 8
/* Dwords k .. k + 7 of the 8 byte rows u8 + j n_in (j < 8) to pq[(k + i) 8 + j]: an 8 x 8 transpose. */
LP_INLINE void q8_transpose8(const uint8_t *u8, int64_t n_in, int64_t k, uint32_t *pq) {
    __m256i r[8], t[8];
    for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_si256((const __m256i *)(u8 + j * n_in + 4 * k));
    for (int j = 0; j < 8; j += 2) {
        t[j] = _mm256_unpacklo_epi32(r[j], r[j + 1]);
        t[j + 1] = _mm256_unpackhi_epi32(r[j], r[j + 1]);
    }
    for (int j = 0; j < 8; j += 4) { /* r: rows j .. j + 3's dwords (0 4), (1 5), (2 6), (3 7) */
        r[j] = _mm256_unpacklo_epi64(t[j], t[j + 2]);
        r[j + 1] = _mm256_unpackhi_epi64(t[j], t[j + 2]);
        r[j + 2] = _mm256_unpacklo_epi64(t[j + 1], t[j + 3]);
        r[j + 3] = _mm256_unpackhi_epi64(t[j + 1], t[j + 3]);
    }
    for (int i = 0; i < 4; i++) {
        _mm256_store_si256((__m256i *)(pq + (k + i) * 8), _mm256_permute2x128_si256(r[i], r[i + 4], 0x20));
        _mm256_store_si256((__m256i *)(pq + (k + i + 4) * 8), _mm256_permute2x128_si256(r[i], r[i + 4], 0x31));
    }
}
#endif

/* Weight rows o .. o + np (np <= Q8MM_NP; the panel's rows past np zero) into the panel: each
 * row decoded (lp_unpack_row16) to bytes, then laid out four values of a row a dword, the
 * panel's rows side by side -- at AVX2 all 8 rows' bytes first, then 8 x 8 dword transposes
 * (the dword-by-dword copy was a third of a 32-row product's time); at AVX512-VNNI 16 rows'
 * bytes, then 16 x 16 transposes, twice (perf, a prompt on the Llama 3.1 8B shape: the copy
 * 8% of the time, these 3%). */
static void q8_pack(int type, const uint8_t *w, int64_t o, int np, const q8x *x, void *scratch, q8w *p) {
    const int64_t n_in = x->n_in, rb = lp_row_bytes(type, n_in), n4 = n_in / 4;
    char *at = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    p->q = (uint8_t *)at, at += n_in * Q8MM_NP;
    p->d = (float *)at, at += (n_in / 16) * Q8MM_NP * 4;
    p->m = (float *)at, at += (n_in / 16) * Q8MM_NP * 4;
    uint8_t *u8 = (uint8_t *)(((uintptr_t)at + 63) & ~(uintptr_t)63);
    int16_t *q16 = (int16_t *)(((uintptr_t)(u8 + (Q8MM_NP == 8 ? 8 : 16) * n_in) + 63) & ~(uintptr_t)63);
    float *d16 = (float *)(((uintptr_t)(q16 + n_in) + 63) & ~(uintptr_t)63), *m16 = d16 + n_in / 16;
    const int step = x->g / 16;
    uint32_t *pq = (uint32_t *)p->q;
    const int nh = Q8MM_NP == 8 ? 8 : 16; /* rows a pass: their bytes, then their transposes */
    for (int j0 = 0; j0 < Q8MM_NP; j0 += nh) {
        for (int j = j0; j < j0 + nh; j++) {
            uint8_t *uj = u8 + (j - j0) * n_in;
            if (j >= np) {
                memset(uj, 0, (size_t)n_in);
                for (int64_t gi = 0; gi < x->ng; gi++) p->d[gi * Q8MM_NP + j] = p->m[gi * Q8MM_NP + j] = 0.0f;
                continue;
            }
            if (!lp_unpack_row8(type, w + (o + j) * rb, n_in, x->off, uj, d16, m16)) {
                lp_unpack_row16(type, w + (o + j) * rb, n_in, q16, d16, m16);
                q8_to_u8(q16, n_in, x->off, uj);
            }
            for (int64_t gi = 0; gi < x->ng; gi++) {
                p->d[gi * Q8MM_NP + j] = d16[gi * step];
                p->m[gi * Q8MM_NP + j] = m16[gi * step];
            }
        }
#if Q8MM_NP == 8
        for (int64_t k = 0; k < n4; k += 8) q8_transpose8(u8, n_in, k, pq);
#else
        for (int64_t k = 0; k < n4; k += 16) q8_transpose16(u8, n_in, k, pq + j0);
#endif
    }
}

size_t lp_q8x_bytes(int64_t n_in, int64_t n) { return q8x_bytes(n_in, n); }

lp_q8x lp_q8x_at(void *buf, int type, int64_t n_in, int64_t n) {
    q8x x = q8x_at(buf, n_in, n, type == LP_Q6_K ? 16 : 32, type == LP_Q6_K ? 32 : 0); /* (offset iff no minima) */
    x.bits = type == LP_Q4_K ? 4 : type == LP_Q5_K ? 5 : 6;
    x.ratio2 = q8_ratio * q8_ratio;
    return x;
}

void lp_q8x_row(lp_q8x *x, const float *xr, int64_t r) { q8_prep_row(xr, x, r); }

int lp_q8x_settle(lp_q8x *x) {
    const int64_t nb = x->n_in / 32, seen = (x->n + 3) / 4 * nb;
    int64_t nf = 0;
    for (int64_t r = 0; r < x->n; r += 4) nf += x->nflag[r];
    if ((float)nf <= q8_max_flagged * (float)seen) return 1;
    memset(x->nflag, 0, (size_t)x->n * sizeof(int32_t)); /* int8 alone: no row's residual pass */
    return 2;
}

size_t lp_q8mm_scratch_bytes(int64_t n_in) { return q8_scratch_bytes(n_in); }

void lp_q8mm_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_q8x *x, float *y, int64_t ldy,
                   int accumulate, void *scratch) {
    const int has_min = lp_has_min(type);
    q8x xt = *x; /* the bits this product's weights have (rows rounded once for Q4_K and Q5_K alike) */
    xt.bits = type == LP_Q4_K ? 4 : type == LP_Q5_K ? 5 : 6;
    for (int64_t o = o0; o < o1; o += Q8MM_NP) {
        const int np = (int)(o1 - o < Q8MM_NP ? o1 - o : Q8MM_NP);
        q8w p;
        q8_pack(type, w, o, np, &xt, scratch, &p);
        q8_panel(has_min, &xt, &p, y + o, ldy, np, accumulate);
    }
}
#endif

#if defined(LP_DET_PANEL)
#if !defined(Q8MM_DET)
#error "det_panel_x86.h's level has no det tile here"
#endif
/* x8's rows as q8x (Q6_K: its 16-groups' offset parts qo16), outputs o0 .. o1: det's tiles only. */
void lp_q8mm_det(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *x8, const int32_t *qo16, float *y,
                 int64_t ldy, int accumulate, void *scratch) {
    const int g16 = type == LP_Q6_K;
    const q8x x = {.n = x8->n, .n_in = x8->n_in, .ng = x8->n_in / (g16 ? 16 : 32), .g = g16 ? 16 : 32, .off = g16 ? 32 : 0,
                   .bits = type == LP_Q4_K ? 4 : type == LP_Q5_K ? 5 : 6, .q = x8->q, .s = x8->d, .sum = x8->sum,
                   .qo = (int32_t *)qo16};
    for (int64_t o = o0; o < o1; o += Q8MM_NP) {
        const int np = (int)(o1 - o < Q8MM_NP ? o1 - o : Q8MM_NP);
        q8w p;
        q8_pack(type, w, o, np, &x, scratch, &p);
        q8_det_panel(&x, &p, y + o, ldy, np, accumulate);
    }
}
#endif

#if defined(LP_Q8P)
/* lp_mm_q8 at the AVX2 level without VNNI: every row rounded to ggml's Q8_K (q8p_x86.c), those
 * that pass its outlier rule (no block of 256 with max |x| > LP_Q8K_RATIO x its rms) multiplied
 * there, a super-block a float step; the others gathered into int8 rows with a scale per 32
 * (q8_prep_row, the residual pass as `residual` says), their products written to their rows of y.
 * Each panel packed once for both. */
static int q8p_mm(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *xf, int64_t n_rows, float *y,
                  int64_t ldy, int accumulate, int residual) {
    void *kbuf = malloc(lp_q8p_x_bytes(n_in, n_rows));
    int64_t *on = malloc((size_t)(2 * n_rows + 1) * sizeof(int64_t)), *off = on ? on + n_rows : NULL;
    if (!kbuf || !on) return free(kbuf), free(on), -1;
    lp_q8p_x xk = lp_q8p_x_at(kbuf, n_in, n_rows);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; r++) lp_q8p_row(&xk, xf + r * n_in, r);
    int64_t non = 0, noff = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        if (xk.on[r]) on[non++] = r;
        else off[noff++] = r;
    }
    void *xbuf = malloc(q8x_bytes(n_in, noff));
    if (!xbuf) return free(kbuf), free(on), -1;
    q8x x = q8x_at(xbuf, n_in, noff, type == LP_Q6_K ? 16 : 32, type == LP_Q6_K ? 32 : 0); /* (offset iff no minima) */
    x.bits = type == LP_Q4_K ? 4 : type == LP_Q5_K ? 5 : 6;
    x.ratio2 = residual ? q8_ratio * q8_ratio : 0.0f;
    const size_t sb = q8_scratch_bytes(n_in);
    int failed = 0;
#pragma omp parallel
    {
        void *scratch = malloc(2 * sb + lp_q8p_scratch_bytes(n_in)); /* (two panels, their Q8_K scales) */
#pragma omp atomic update
        failed += scratch == NULL;
#pragma omp for schedule(static)
        for (int64_t k = 0; k < noff; k++) q8_prep_row(xf + off[k] * n_in, &x, k);
        if (!failed) {
#pragma omp for schedule(static)
            for (int64_t o = 0; o < n_out; o += 2 * Q8MM_NP) { /* (two panels a pass: lp_q8p_panel's 3 x 16 tile) */
                const int nc = (int)(n_out - o < 2 * Q8MM_NP ? n_out - o : 2 * Q8MM_NP);
                q8w p[2];
                for (int j = 0; j * Q8MM_NP < nc; j++) {
                    const int np = nc - j * Q8MM_NP < Q8MM_NP ? nc - j * Q8MM_NP : Q8MM_NP;
                    q8_pack(type, w, o + j * Q8MM_NP, np, &x, (char *)scratch + j * sb, &p[j]);
                    if (noff) q8_panel_rows(lp_has_min(type), &x, &p[j], y + o + j * Q8MM_NP, ldy, off, np, accumulate);
                }
                lp_q8p_panel(type, w, o, nc, (const uint32_t *)p[0].q, nc > Q8MM_NP ? (const uint32_t *)p[1].q : NULL, &xk, on, non,
                             y, ldy, accumulate, (char *)scratch + 2 * sb);
            }
        }
        free(scratch);
    }
    free(kbuf), free(on), free(xbuf);
    return failed ? -1 : 0;
}
#endif

int lp_mm_q8(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *xf, int64_t n_rows, float *y,
             int64_t ldy, int accumulate, int residual) {
#if defined(LP_Q8MM)
    if (lp_q8mm32_type(type)) return lp_mm_q8_32(type, w, n_out, n_in, xf, n_rows, y, ldy, accumulate, residual);
#if defined(LP_Q8P)
    if (lp_q8p_covers(type)) return q8p_mm(type, w, n_out, n_in, xf, n_rows, y, ldy, accumulate, residual);
#endif
    void *xbuf = malloc(q8x_bytes(n_in, n_rows));
    if (!xbuf) return -1;
    q8x x = q8x_at(xbuf, n_in, n_rows, type == LP_Q6_K ? 16 : 32, type == LP_Q6_K ? 32 : 0); /* (offset iff no minima) */
    x.bits = type == LP_Q4_K ? 4 : type == LP_Q5_K ? 5 : 6;
    x.ratio2 = residual ? q8_ratio * q8_ratio : 0.0f;
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
            for (int64_t o = 0; o < n_out; o += Q8MM_NP)
                lp_q8mm_chunk(type, w, o, o + Q8MM_NP < n_out ? o + Q8MM_NP : n_out, &x, y, ldy, accumulate, scratch);
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
    return lp_q8mm_mode(type, x, n_in, n_rows);
}

int lp_q8mm_mode(int type, const float *x, int64_t n_in, int64_t n_rows) {
    if (!lp_q8mm_covers_type(type, n_in) || n_rows < 1) return 0;
    const int64_t seen = (n_rows + 3) / 4 * (n_in / 32);
    /* else int8 alone: at the AVX2 level not the fp32 GEMM (2-3x slower), at the AVX512-VNNI
     * level not the int16 lanes (1.6x); still finer than ggml-cpu's Q8_K (q8mm_x86.h) */
    return (float)q8_outliers(x, n_in, n_rows, 4) <= q8_max_flagged * (float)seen ? 1 : 2;
}

double lp_q8mm_flagged(const float *x, int64_t n_in, int64_t n_rows) {
    return n_rows && n_in >= 32 ? (double)q8_outliers(x, n_in, n_rows, 1) / (double)(n_rows * (n_in / 32)) : 0.0;
}
