/* q8mm32_x86.c: see q8mm32_x86.h.  A product: every activation row rounded to int8 (p32_row)
 * and each block column's list of flagged rows (p32_column), then per panel of Q8MM32_NP
 * weight rows (threads take panels): the panel decoded once (p32_pack), P32_MR activation
 * rows at a time against it (p32_tile), then per block column its flagged rows' residuals,
 * P32_MR rows a tile (p32_fix).  The instructions: q8mm32_512.inc (AVX512-VNNI) or
 * q8mm32_256.inc (AVX2). */
#include "q8mm32_x86.h"

#include "det_panel_x86.h"
#include "q8_avx2.h"
#include "q8mm_x86.h"
#include "quants.h"
#include "unpack_x86.h"

/* The most residual tiles per main tile a product takes (set before any product). */
static float q32_max_fixes = LP_Q8MM32_MAX_FIXES, q32_ratio = LP_Q8MM32_RATIO;
void lp_q8mm32_set(float max_fixes, float ratio) {
    q32_max_fixes = max_fixes;
    q32_ratio = ratio;
}
/* LLAMAPY_Q8MM=all: every covered product (q8mm_x86.c reads the same switch). */
__attribute__((constructor)) static void q8mm32_init(void) {
    const char *env = getenv("LLAMAPY_Q8MM");
    if (env && strcmp(env, "all") == 0) q32_max_fixes = 1.0f;
}

int lp_q8mm32_type(int type) {
    return type == LP_Q4_0 || type == LP_Q4_1 || type == LP_Q5_0 || type == LP_Q5_1 || type == LP_Q8_0;
}

/* Is block b of row xr an outlier block (max |x| > ratio x its rms)? */
LP_INLINE int p32_outlier(const float *xb, float ratio2) {
#if defined(LP_AVX512)
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float ss = _mm512_reduce_add_ps(_mm512_fmadd_ps(x0, x0, _mm512_mul_ps(x1, x1)));
#elif defined(LP_AVX2)
    float amax, ss;
    q8_stats(xb, &amax, &ss);
#else
    float amax = 0.0f, ss = 0.0f;
    for (int k = 0; k < 32; k++) {
        const float v = fabsf(xb[k]);
        amax = v > amax ? v : amax;
        ss += v * v;
    }
#endif
    return ratio2 > 0.0f && amax > 0.0f && amax * amax * 32.0f > ratio2 * ss;
}

double lp_q8mm32_fixes(const float *x, int64_t n_in, int64_t n_rows, float ratio, int every) {
    const int64_t nb = n_in / 32, nt = (n_rows + Q8MM32_MR - 1) / Q8MM32_MR;
    int64_t fixes = 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t c = 0;
        for (int64_t r = 0; r < n_rows; r += every) c += p32_outlier(x + r * n_in + 32 * b, ratio * ratio);
        fixes += (c * every + Q8MM32_MR - 1) / Q8MM32_MR;
    }
    return nt * nb ? (double)fixes / (double)(nt * nb) : 0.0;
}

int lp_q8mm32_takes(const float *x, int64_t n_in, int64_t n_rows) {
    return lp_q8mm32_fixes(x, n_in, n_rows, q32_ratio, 4) <= (double)q32_max_fixes;
}

#if defined(LP_Q8MM)

/* The activation rows as the product reads them. */
typedef struct {
    int64_t n, n_in, nb; /* rows, row length, blocks a row */
    int off;             /* the weights' offset (their bytes are q + off, unsigned) */
    int8_t *q, *rq;      /* [n, n_in] int8, and the residual (zero where the block is not flagged; P32_COLS: below) */
    float *s;            /* [n, nb] the block's scale (max |x| / 127) */
    float *sum;          /* [n, nb] the exact float sum of the block (the minima's factor) */
    int32_t *qo, *ro;    /* [n, nb] off x the sum of q (of rq) over the block (ro: P32_COLS below) */
    uint8_t *flag;       /* [n, nb] 1: the block's residual is in rq */
    int32_t *col;        /* [nb, n] per block column, the rows with that block flagged (ncol[b] of them) */
    int32_t *ncol;       /* [nb] */
    float *rs;           /* P32_COLS: [nb, n] the flagged blocks' s / 254, column b's ncol[b] first */
} x32;
/* P32_COLS (the level's p32_row and p32_fix): rq [nb, n, 32] and ro [nb, n] by block column, the
 * flagged blocks only, which p32_column moves to the front of their column (the order of col):
 * a residual tile reads its rows' blocks one after another, not 4 rows of a 320 KiB rq. */

static size_t x32_bytes(int64_t n_in, int64_t n) {
    const int64_t nb = n_in / 32;
    return (size_t)n * ((size_t)n_in * 2 + (size_t)nb * 25) + (size_t)nb * 4 + 3 * 64;
}

static x32 x32_at(void *buf, int64_t n_in, int64_t n, int off) {
    x32 x = {.n = n, .n_in = n_in, .nb = n_in / 32, .off = off};
    char *p = (char *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    x.q = (int8_t *)p, p += n * n_in;
    x.rq = (int8_t *)p, p += n * n_in;
    x.s = (float *)p, p += n * x.nb * 4;
    x.sum = (float *)p, p += n * x.nb * 4;
    x.qo = (int32_t *)p, p += n * x.nb * 4;
    x.ro = (int32_t *)p, p += n * x.nb * 4;
    x.col = (int32_t *)p, p += n * x.nb * 4;
    x.ncol = (int32_t *)p, p += x.nb * 4;
    x.rs = (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63), p = (char *)x.rs + n * x.nb * 4;
    x.flag = (uint8_t *)p;
    return x;
}

/* A panel: q [n_in / 4][Q8MM32_NP] dwords (4 values of a row, each q + off), d and m
 * [nb][Q8MM32_NP] (the block's scale and minimum). */
typedef struct {
    uint8_t *q;
    float *d, *m;
} w32;

#if defined(LP_VNNI)
#include "q8mm32_512.inc"
#else
#include "q8mm32_256.inc"
#endif
#ifndef P32_COLS
#define P32_COLS 0 /* the level's residuals by row: rq [n, n_in], ro [n, nb] */
#endif
#ifndef P32_DET_ANY_OFF
#define P32_DET_ANY_OFF 0 /* the level's det step takes off Q4_0's and Q5_0's offsets only */
#endif

/* Block column b's list of flagged rows (P32_COLS: their residuals moved up to the list's places). */
static void p32_column(x32 *x, int64_t b) {
    const int64_t n = x->n;
    int32_t c = 0, *col = x->col + b * n;
    for (int64_t r = 0; r < n; r++) {
        if (!x->flag[r * x->nb + b]) continue;
#if P32_COLS
        const int64_t to = b * n + c, from = b * n + r;
        if (to != from) {
            memcpy(x->rq + to * 32, x->rq + from * 32, 32);
            x->ro[to] = x->ro[from];
        }
        x->rs[to] = x->s[r * x->nb + b] / 254.0f;
#endif
        col[c++] = (int32_t)r;
    }
    x->ncol[b] = c;
}
#ifndef P32_YBUF
#define P32_YBUF 0 /* the level's tiles write y's rows themselves */
#endif

static size_t p32_scratch_bytes(int64_t n_in) {
    return (size_t)n_in * Q8MM32_NP + 2 * (size_t)(n_in / 32) * Q8MM32_NP * 4 + (size_t)n_in * 3 + (size_t)(n_in / 16) * 8 +
           4 * 64;
}

/* Weight rows o .. o + np (np <= Q8MM32_NP; the panel's rows past np zero) into the panel. */
static void p32_pack(int type, const uint8_t *w, int64_t o, int np, const x32 *x, void *scratch, w32 *p) {
    const int64_t n_in = x->n_in, rb = lp_row_bytes(type, n_in), n4 = n_in / 4, nb = x->nb;
    char *at = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    p->q = (uint8_t *)at, at += n_in * Q8MM32_NP;
    p->d = (float *)at, at += nb * Q8MM32_NP * 4;
    p->m = (float *)at, at += nb * Q8MM32_NP * 4;
    int16_t *q16 = (int16_t *)(((uintptr_t)at + 63) & ~(uintptr_t)63);
    uint8_t *u8 = (uint8_t *)(q16 + n_in);
    float *d16 = (float *)(((uintptr_t)(u8 + n_in) + 63) & ~(uintptr_t)63), *m16 = d16 + n_in / 16;
    uint32_t *pq = (uint32_t *)p->q;
    for (int j = 0; j < Q8MM32_NP; j++) {
        if (j >= np) {
            for (int64_t k = 0; k < n4; k++) pq[k * Q8MM32_NP + j] = 0;
            for (int64_t b = 0; b < nb; b++) p->d[b * Q8MM32_NP + j] = p->m[b * Q8MM32_NP + j] = 0.0f;
            continue;
        }
        lp_unpack_row16(type, w + (o + j) * rb, n_in, q16, d16, m16);
        p32_to_u8(q16, n_in, x->off, u8);
        const uint32_t *u32 = (const uint32_t *)u8;
        for (int64_t k = 0; k < n4; k++) pq[k * Q8MM32_NP + j] = u32[k];
        for (int64_t b = 0; b < nb; b++) {
            p->d[b * Q8MM32_NP + j] = d16[2 * b];
            p->m[b * Q8MM32_NP + j] = m16[2 * b];
        }
    }
}

/* The previous panel's outputs on their way from its buffer (P32_YBUF) to y: rows done .. n. */
typedef struct {
    float *y;
    const float *yb;
    int64_t ldy, done, n;
    int nc;
} p32_out;

/* Up to rows more of o's rows to y, and the lines of the next as many asked for (a store to a line
 * not in cache waited for it: 6% of a 2048x640 product's time). */
static void p32_drain(p32_out *o, int64_t rows) {
    const int64_t e = o->done + rows < o->n ? o->done + rows : o->n;
#if P32_YBUF
    if (e > o->done) p32_ybuf(o->y + o->done * o->ldy, o->ldy, (float *)o->yb + o->done * Q8MM32_NP, e - o->done, o->nc, 0);
    for (int64_t r = e; r < e + rows && r < o->n; r++)
        for (int c = 0; c < o->nc; c += 16) __builtin_prefetch(o->y + r * o->ldy + c, 1, 3);
#endif
    o->done = e;
}

/* Every activation row against one packed panel: P32_MR rows a tile, the last its own size;
 * then each block column's flagged rows, P32_MR at a time (one type: its minima and bits).
 * With out (P32_YBUF), P32_MR rows of the last panel's buffer go to y after each tile (its
 * stores, 8 KiB apart in a 2048-wide y, spread over the tiles as the tiles' own were). */
LP_INLINE void p32_panel_as(const int det, const int has_min, const int bits, const x32 *x, const w32 *p, float *y, int64_t ldy,
                            int nc, int accumulate, p32_out *out) {
    int64_t m0 = 0;
    for (; m0 + P32_MR <= x->n; m0 += P32_MR) {
        p32_tile_as(det, P32_MR, has_min, bits, x, m0, p, y, ldy, nc, accumulate);
        if (out) p32_drain(out, P32_MR);
    }
    if (out) p32_drain(out, x->n);
    switch ((int)(x->n - m0)) {
#define P32_TAIL(k)                                                                \
    case k: p32_tile_as(det, k, has_min, bits, x, m0, p, y, ldy, nc, accumulate); break;
        P32_LAST(P32_TAIL)
#undef P32_TAIL
    default: break;
    }
    for (int64_t b = 0; !det && b < x->nb; b++) { /* (det: no residuals) */
        const int32_t *rows = x->col + b * x->n;
        int64_t i = 0;
        for (; i + P32_MR <= x->ncol[b]; i += P32_MR) p32_fix(P32_MR, bits, x, b, rows + i, p, y, ldy, nc);
        switch ((int)(x->ncol[b] - i)) {
#define P32_REST(k)                                                                \
    case k: p32_fix(k, bits, x, b, rows + i, p, y, ldy, nc); break;
            P32_LAST(P32_REST)
#undef P32_REST
        default: break;
        }
    }
}
LP_INLINE void p32_panel_of(const int has_min, const int bits, const x32 *x, const w32 *p, float *y, int64_t ldy, int nc,
                            int accumulate, p32_out *out) {
    p32_panel_as(0, has_min, bits, x, p, y, ldy, nc, accumulate, out);
}

static void p32_panel_to(int type, const x32 *x, const w32 *p, float *y, int64_t ldy, int nc, int accumulate, p32_out *out) {
    switch (type) {
    case LP_Q4_0: p32_panel_of(0, 4, x, p, y, ldy, nc, accumulate, out); break;
    case LP_Q4_1: p32_panel_of(1, 4, x, p, y, ldy, nc, accumulate, out); break;
    case LP_Q5_0: p32_panel_of(0, 5, x, p, y, ldy, nc, accumulate, out); break;
    case LP_Q5_1: p32_panel_of(1, 5, x, p, y, ldy, nc, accumulate, out); break;
    default: p32_panel_of(0, 8, x, p, y, ldy, nc, accumulate, out); break; /* Q8_0 */
    }
}

/* The panel's products into y [x->n, nc] (ldy apart).  With yb (P32_YBUF, a product with residuals:
 * x->n x Q8MM32_NP floats, 32 KiB at 512 rows) the tiles and the residual tiles write yb, and out
 * takes it to y during the next panel's tiles (p32_drain): y's rows 8 KiB apart (a 2048-wide
 * product) share a few L1 and L2 sets, and each residual tile had read its rows back from L3.
 * The same sums in the same order (yb starts as y's rows where accumulating). */
static void p32_panel(int type, const x32 *x, const w32 *p, float *y, int64_t ldy, int nc, int accumulate, float *yb,
                      p32_out *out) {
#if P32_YBUF
    if (yb) {
        if (accumulate) p32_ybuf(y, ldy, yb, x->n, nc, 1);
        p32_panel_to(type, x, p, yb, Q8MM32_NP, Q8MM32_NP, accumulate, out);
        *out = (p32_out){.y = y, .yb = yb, .ldy = ldy, .done = 0, .n = x->n, .nc = nc};
        return;
    }
#endif
    (void)yb, (void)out;
    p32_panel_to(type, x, p, y, ldy, nc, accumulate, NULL);
}

/* The weights' offset to unsigned bytes: the signed types' -min q (Q8_0's -128 .. 127: 128, or
 * 0 where its bytes stay signed: q8mm32_256.inc). */
static int p32_offset(int type) {
    switch (type) {
    case LP_Q4_0: return 8;
    case LP_Q5_0: return 16;
    case LP_Q8_0: return P32_Q8_0_OFF;
    default: return 0; /* Q4_1, Q5_1: q >= 0 */
    }
}
#endif

#if defined(LP_Q8MM)
_Static_assert(Q8MM32_NP == LP_Q8MM32_NP, "q8mm32_x86.h's panel rows are the included products'");
#endif
#if defined(LP_DET_PANEL32)
#if !defined(P32_DET)
#error "det_panel_x86.h's level has no det tile here"
#endif
/* p32_tile_as's det step takes the weights' offset off as det8 does, off x qs: q8mm32_256.inc's as a
 * shift (Q4_0's 8, Q5_0's 16) and none for Q8_0 (its bytes signed there: P32_DET_ANY_OFF 0);
 * q8mm32_512.inc's as x->off x qs, any offset (Q8_0's 128 there: P32_DET_ANY_OFF 1).  (The exact
 * integer sum of q_w q_x is det8's whatever offset either one reads the weights with.) */
_Static_assert(P32_DET_ANY_OFF || P32_Q8_0_OFF == 0, "p32_tile_as's det step: Q4_0's offset 8, Q5_0's 16, Q8_0 none");
size_t lp_q8mm32_det_scratch_bytes(int64_t n_in) { return p32_scratch_bytes(n_in); }

/* x8's rows as x32 (qo: the blocks' sums of q, det's tile multiplies by off), outputs o0 .. o1
 * (o0 a multiple of Q8MM32_NP: whole panels but the last). */
void lp_q8mm32_det(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *x8, float *y, int64_t ldy,
                   int accumulate, void *scratch) {
    const x32 x = {.n = x8->n, .n_in = x8->n_in, .nb = x8->n_in / 32, .off = p32_offset(type), .q = x8->q, .s = x8->d,
                   .sum = x8->sum, .qo = x8->qs};
    for (int64_t o = o0; o < o1; o += Q8MM32_NP) {
        const int np = (int)(o1 - o < Q8MM32_NP ? o1 - o : Q8MM32_NP);
        w32 p;
        p32_pack(type, w, o, np, &x, scratch, &p);
        switch (type) {
        case LP_Q4_0: p32_panel_as(1, 0, 4, &x, &p, y + o, ldy, np, accumulate, NULL); break;
        case LP_Q4_1: p32_panel_as(1, 1, 4, &x, &p, y + o, ldy, np, accumulate, NULL); break;
        case LP_Q5_0: p32_panel_as(1, 0, 5, &x, &p, y + o, ldy, np, accumulate, NULL); break;
        case LP_Q5_1: p32_panel_as(1, 1, 5, &x, &p, y + o, ldy, np, accumulate, NULL); break;
        default: p32_panel_as(1, 0, 8, &x, &p, y + o, ldy, np, accumulate, NULL); break; /* Q8_0 */
        }
    }
}
#endif

int lp_mm_q8_32(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *xf, int64_t n_rows, float *y,
                int64_t ldy, int accumulate, int residual) {
    const float ratio = residual ? q32_ratio : 0.0f;
#if defined(LP_Q8MM)
    void *xbuf = malloc(x32_bytes(n_in, n_rows));
    if (!xbuf) return -1;
    x32 x = x32_at(xbuf, n_in, n_rows, p32_offset(type));
    const int64_t nb = n_in / 32;
    int failed = 0;
#pragma omp parallel
    {
        /* (two panels' outputs, P32_YBUF: the one being computed and the one going to y) */
        const int ybuf_on = P32_YBUF && ratio > 0.0f;
        void *scratch = malloc(p32_scratch_bytes(n_in)), *ybuf = ybuf_on ? malloc((size_t)n_rows * Q8MM32_NP * 8 + 64) : NULL;
#pragma omp atomic update
        failed += scratch == NULL || (ybuf_on && ybuf == NULL);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_rows; r++) p32_row(xf + r * n_in, &x, r, ratio);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) p32_column(&x, b);
        /* (the loops' implied barriers: every thread's malloc counted; all skip the products together) */
        if (!failed) {
            /* the panels through ybuf where the residual tiles are 1/32 of the tiles' blocks or more (a
             * 2048x640 Q5_0 product of random rows, no residuals to speak of, took 1.02x longer so) */
            int64_t fixes = 0;
            for (int64_t b = 0; b < nb; b++) fixes += (x.ncol[b] + P32_MR - 1) / P32_MR;
            const int many = 32 * fixes >= (n_rows + P32_MR - 1) / P32_MR * nb;
            float *yb = ybuf && many ? (float *)(((uintptr_t)ybuf + 63) & ~(uintptr_t)63) : NULL;
            p32_out out = {.y = NULL};
            int64_t k = 0;
#pragma omp for schedule(static) nowait
            for (int64_t o = 0; o < n_out; o += Q8MM32_NP) {
                const int np = (int)(n_out - o < Q8MM32_NP ? n_out - o : Q8MM32_NP);
                w32 p;
                p32_pack(type, w, o, np, &x, scratch, &p);
                p32_panel(type, &x, &p, y + o, ldy, np, accumulate, yb ? yb + (k++ & 1) * n_rows * Q8MM32_NP : NULL, &out);
            }
            if (out.y) p32_drain(&out, out.n);
        }
        free(scratch);
        free(ybuf);
    }
    free(xbuf);
    return failed ? -1 : 0;
#else
    (void)type, (void)w, (void)n_out, (void)n_in, (void)xf, (void)n_rows, (void)y, (void)ldy, (void)accumulate, (void)residual;
    return -2;
#endif
}
