/* The products y (+)= x W^T of few activation rows against a weight matrix kept in its GGUF
 * blocks, and the conversions around them (dequantization, embedding rows).
 *
 * Exported (ctypes, see kernels/build.py): lp_mm, lp_mm_glu, lp_dequant, lp_dequant_bf16, lp_get_rows (and
 * lp_set_coarse_bf16 / lp_coarse_bf16, mm_xprep.inc).
 * Internal, for a caller's own parallel region (layers.c): lp_prep_for + lp_mm_for.
 * One translation unit with two parts included whole (mm_xprep.inc: the row-count rules and the
 * activation rows' forms; mm_lanes.h: x86's lane chunks), so that their small static
 * functions inline into mm_chunk and lp_mm. */
#include <omp.h>

#include "amx_x86.h"
#include "amxk_x86.h"
#include "det8_row_x86.h"
#include "dot.h"
#include "mm.h"
#include "quants.h"
#include "row1_x86.h"
#include "row1z_x86.h"
#include "q8k4_x86.h"
#include "q8kz_x86.h"
#include "row1q8k_x86.h"
#include "rows_det_x86.h"
#include "unpack_x86.h"

#define CHUNK LP_MM_CHUNK /* output rows per task */

#include "mm_xprep.inc"

static inline void put(float *y, float v, int accumulate) { *y = accumulate ? *y + v : v; }

#include "mm_lanes.h"

size_t lp_mm_scratch_bytes(int64_t n_in) {
    const size_t tiles = lp_wrow_bytes(n_in) + LP_TW * (size_t)n_in * 6 + 192, lane_rows = LANES_NW * lanes_row_bytes(n_in);
    const size_t twins = 2 * lanes_row_bytes(n_in) + TWIN_NP * twin_pair_bytes(n_in);
    size_t most = tiles > lane_rows ? tiles : lane_rows;
    most = most > twins ? most : twins;
#if defined(LP_AMX)
    most = most > lp_amx_scratch_bytes(n_in) ? most : lp_amx_scratch_bytes(n_in);
    most = most > lp_amxk_scratch_bytes(n_in) ? most : lp_amxk_scratch_bytes(n_in);
#endif
    return most;
}

/* F16 / BF16 weights against LP_FROWS + 1 .. LP_FROWS_GROUPED rows (a verification of 8 to 15
 * drafts): each pair of weight rows read from memory once (an odd last row paired with
 * itself), against groups of LP_FROWS2 activation rows in turn (the later groups find the pair
 * in L1).  Every row, in a group of any size, is rows_float2's one FMA chain, the chain of 5..8
 * rows: the same sums whatever the grouping, the pairing or the threads.  (The fp32 tiles read
 * 13 rows in three passes over LP_TW interleaved rows: 1.9x the time of 8 rows in a SmolLM2
 * F16 decode on a Zen 4.) */
static void float_row_groups(int kind, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1, int64_t n_in,
                             const float *x, int64_t n, float *y, int64_t ldy, int accumulate) {
    float y2[2 * LP_FROWS];
    for (int64_t o = o0; o < o1; o += 2) {
        const int two = o + 1 < o1;
        const uint8_t *w0 = w + o * rb;
        for (int64_t g = 0; g < n; g += LP_FROWS2) {
            const int64_t nr = n - g < LP_FROWS2 ? n - g : LP_FROWS2;
            lp_dot_float_rows(kind, w0, two ? w0 + rb : w0, x + g * n_in, n_in, n_in, (int)nr, y2);
            for (int64_t r = g; r < g + nr; r++) {
                put(y + r * ldy + o, y2[r - g], accumulate);
                if (two) put(y + r * ldy + o + 1, y2[LP_FROWS + r - g], accumulate);
            }
        }
    }
}

/* Output row o as float32: the file's floats, or dequantized into buf. */
static const float *row_f32(int type, const uint8_t *w, int64_t rb, int64_t o, int64_t n_in, float *buf, lp_wrow wr) {
    if (type == LP_F32) return (const float *)(w + o * rb);
    lp_row_to_f32(type, w + o * rb, n_in, buf, wr);
    return buf;
}

/* The weight lines LP_PF_AHEAD bytes past rows o..o+k-1 (capped at the matrix's end), requested
 * while those rows compute: a decode row's products are bound by how fast the weights stream,
 * and the hardware prefetchers alone lose rows read two side by side, or rows of ~1 KB and
 * more (a third slower from memory without this; benchmarks/kernel_ab.py --stream).  Far
 * enough ahead to cover the memory's latency at its bandwidth: on a 2-core Intel Xeon (KVM),
 * Q4_1 3072 x 576 one row streamed 0.93 ns a block at 1.4 KB ahead, 0.74-0.82 at 2.9-8.6 KB; on a
 * 2-core AMD EPYC (Zen 4, KVM) Q4_K / Q6_K 16384 x 2048 streamed 1.07-1.21x faster at 8 KB than
 * at 3 KB (1 and 2 threads; 16 and 32 KB no faster, 1.5 KB 0.74-0.78x). */
#ifndef LP_PF_AHEAD
#define LP_PF_AHEAD 8192
#endif
LP_INLINE void prefetch_ahead(const uint8_t *w, int64_t rb, int64_t o, int64_t k, int64_t n_out) {
    const char *end = (const char *)(w + n_out * rb), *e = (const char *)(w + (o + k) * rb) + LP_PF_AHEAD;
    for (const char *p = (const char *)(((uintptr_t)(w + o * rb + LP_PF_AHEAD)) & ~(uintptr_t)63); p < e && p < end; p += 64)
        LP_PREFETCH_W(p);
}

/* For a kernel that prefetches as it computes (lp_row1_prefetches), reading rows o..o+k-1 in
 * one pass: the distance, in whole passes of k rows and at least LP_PF_AHEAD bytes, at which
 * each block's bytes lie in a later pass (so every line of that pass is asked for, once); 0
 * where that pass lies past the matrix's end. */
LP_INLINE int64_t pass_ahead(int64_t rb, int64_t o, int64_t k, int64_t n_out) {
    const int64_t m = (LP_PF_AHEAD + k * rb - 1) / (k * rb);
    return o + k * (m + 1) <= n_out ? m * k * rb : 0;
}

#if defined(LP_AMX)
/* Does xp's product with this type take the AMX tiles (mm_chunk's first choice)? */
static int takes_amx(int type, int64_t n_in, const lp_xprep *xp) {
    const int64_t n = xp->n;
    const int reads = lp_xprep_reads(type, n_in, n);
    return (reads & LP_READS_INTS) && (n <= LP_FEW_ROWS || many_ints(n_in, n)) && (xp->reads & LP_READS_AMX);
}
#endif

#include "mm_q8k.inc"
#include "mm_q8kz.inc"

/* Output rows o0..o1 of the product: each weight row read once and multiplied by every
 * activation row.  Up to LP_FEW_ROWS rows: integer products on the int16 activations (on x86
 * from LP_F32_ROWS rows in lanes: twin_chunk, lanes_chunk), else straight from the blocks where
 * row1_x86.c has the type (one weight row decoded once for all activation rows), else through
 * the canonical form -- so a verification or a few sequences get the one-row arithmetic.
 * LP_LANES_ROWS rows or more of a block type: the same integer products, on x86 in lanes
 * (lanes_chunk), elsewhere row by row.  (A bf16 CPU's coarse types from LP_F32_ROWS rows: bf16
 * tiles.)  F16 / BF16 weights against up to LP_FROWS rows: one weight row at a time, read from
 * the file as one stream (dot.c lp_dot_float_rows).  Otherwise (float types, and block types
 * between the two bounds): LP_TW rows at a time, dequantized to fp32 (f16 / bf16 widened as
 * they are read), exact fp32 products in LP_TW x LP_TX tiles, the next LP_TW rows prefetched.
 * n_out: the matrix's rows (the prefetch stops there). */
static void mm_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xprep *xp,
                     float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t rb = lp_row_bytes(type, n_in), n = xp->n;
    lp_wrow wr = lp_wrow_at(scratch, n_in);
    float *wf = (float *)(((uintptr_t)((char *)scratch + lp_wrow_bytes(n_in)) + 63) & ~(uintptr_t)63);
    const int g16 = lp_g16(type), has_min = lp_has_min(type);
    float acc[LP_TW * LP_TX];
    /* integer products: few rows or many (block types but bf16 CPUs' coarse ones from
     * LP_F32_ROWS rows); the forms of x they read are lp_xprep_reads's, one decision for both */
    const int reads = lp_xprep_ints(lp_xprep_reads(type, n_in, n), xp->reads);
    const int ints = (reads & LP_READS_INTS) && (n <= LP_FEW_ROWS || many_ints(n_in, n));
#if defined(LP_Q8K)
    if (n >= LP_F32_ROWS && xp->xr.q8 && (type == LP_Q6_K || type == LP_Q4_K) && q8k_chunk(type, w, o0, o1, n_out, n_in, xp, y, ldy, accumulate))
        return; /* a batched decode's rows as Q8_K */
#endif
#if defined(LP_Q8KZ)
    if (xp->xr.q8 && lp_q8kz_routes(type, n) && q8kz_chunk(type, w, o0, o1, n_out, n_in, xp, y, ldy, accumulate))
        return; /* a verification's or a batched decode's 2-127 rows as Q8_K, AVX-512 VNNI */
#endif
#if defined(LP_AMX)
    if (takes_amx(type, n_in, xp)) { /* a prompt's product on AMX tiles */
        lp_amx_chunk(type, w, o0, o1, n_in, xp, y, ldy, accumulate, scratch);
        return;
    }
#endif
#if defined(LP_TWIN)
    if (ints && twin_ints(n_in, n)) {
        twin_chunk(type, w, o0, o1, n_out, n_in, xp, y, ldy, accumulate, scratch);
        return;
    }
#endif
#if defined(LP_LANES8)
    if ((reads & LP_READS_INTS) && rows8_few(n_in, n) && xp->x8.q && lp_lanes8_type(type)) { /* 2, 3 rows in int8 */
        lp_det8_rows(type, w, o0, o1, n_out, &xp->x8, (int)n, y, ldy, accumulate);
        return;
    }
    if ((reads & LP_READS_INTS) && lanes8_rows(n_in, n) && xp->xl8.n_grp && lp_lanes8_type(type)) { /* AVX2, no VNNI: int8 lanes */
        lanes8_chunk(type, w, o0, o1, n_out, n_in, xp, y, ldy, accumulate, scratch);
        return;
    }
#endif
#if defined(LP_LANES)
    if (ints && lanes_ints(n_in, n)) {
        lanes_chunk(type, w, o0, o1, n_out, n_in, xp, y, ldy, accumulate, scratch);
        return;
    }
#endif
#if defined(LP_BF16)
    if (reads & LP_READS_BF16) {
        uint16_t *wb = (uint16_t *)(wf + 3 * n_in);
        for (int64_t o = o0; o < o1; o += 3) {
            const int nw = (int)(o1 - o < 3 ? o1 - o : 3);
            const uint16_t *f[3];
            for (int j = 0; j < nw; j++) {
                lp_to_bf16(row_f32(type, w, rb, o + j, n_in, wf + j * n_in, wr), n_in, wb + j * n_in);
                f[j] = wb + j * n_in;
            }
            for (int64_t r0 = 0; r0 < n; r0 += 4) {
                const int nr = (int)(n - r0 < 4 ? n - r0 : 4);
                lp_dot_tile_bf16(f, nw, n_in, xp->xb + r0 * n_in, n_in, nr, acc);
                for (int j = 0; j < nw; j++)
                    for (int i = 0; i < nr; i++) put(y + (r0 + i) * ldy + o + j, acc[LP_TX * j + i], accumulate);
            }
        }
        return;
    }
#endif
    if (!ints) {
        const int64_t nt = (n + LP_TX - 1) / LP_TX;
        const int kind = type == LP_F16 ? LP_WF16 : type == LP_BF16_T ? LP_WBF16 : LP_WF32;
        if (n <= LP_FROWS && kind != LP_WF32) { /* f16 / bf16 decode, verification: each weight row one stream */
            int64_t o = o0;
            for (float y2[2 * LP_FROWS]; n >= LP_F32_ROWS && n <= LP_FROWS2 && o + 2 <= o1; o += 2) { /* two weight rows a pass */
                lp_dot_float_rows(kind, w + o * rb, w + (o + 1) * rb, xp->x, n_in, n_in, (int)n, y2);
                for (int64_t r = 0; r < n; r++) {
                    put(y + r * ldy + o, y2[r], accumulate);
                    put(y + r * ldy + o + 1, y2[LP_FROWS + r], accumulate);
                }
            }
            for (; o < o1; o++) {
                lp_dot_float_rows(kind, w + o * rb, NULL, xp->x, n_in, n_in, (int)n, acc);
                for (int64_t r = 0; r < n; r++) put(y + r * ldy + o, acc[r], accumulate);
            }
            return;
        }
        if (n <= LP_FROWS_GROUPED && kind != LP_WF32) { /* a longer verification: row groups */
            float_row_groups(kind, w, rb, o0, o1, n_in, xp->x, n, y, ldy, accumulate);
            return;
        }
        for (int64_t o = o0; o < o1; o += LP_TW) {
            const int nw = (int)(o1 - o < LP_TW ? o1 - o : LP_TW);
            const void *f[LP_TW];
            for (int j = 0; j < nw; j++) /* float types straight from the file, the rest dequantized */
                f[j] = kind == LP_WF32 ? (const void *)row_f32(type, w, rb, o + j, n_in, wf + j * n_in, wr)
                                       : (const void *)(w + (o + j) * rb);
            { /* the next tile's weight rows on their way while this one computes */
                const int64_t e = o + 2 * LP_TW < n_out ? o + 2 * LP_TW : n_out;
                for (const char *p = (const char *)(w + (o + LP_TW) * rb), *pe = (const char *)(w + e * rb); p < pe; p += 64)
                    LP_PREFETCH_W(p);
            }
            for (int64_t t = 0; t < nt; t++) { /* the rows in nt tiles of near-equal size (8: 4 + 4, not 6 + 2) */
                const int64_t r0 = n * t / nt;
                const int nr = (int)(n * (t + 1) / nt - r0);
                lp_dot_tile_f32(kind, f, nw, n_in, xp->x + r0 * n_in, n_in, nr, acc);
                for (int j = 0; j < nw; j++)
                    for (int i = 0; i < nr; i++) put(y + (r0 + i) * ldy + o + j, acc[LP_TX * j + i], accumulate);
            }
        }
        return;
    }
    const int self_pf = lp_row1_prefetches(type, &xp->xr); /* x86 K-quants: the task's pairs first (lp_rows_q8k_run) */
    int64_t o = o0 + (n == 1 && self_pf ? lp_rows_q8k_run(type, w, rb, o0, o1, n_out, &xp->xr, y, accumulate) : 0);
    for (const int k = lp_row1_pass(type); n == 1 && o + k <= o1; o += k) { /* k weight rows a pass where the type has such a path */
        if (!self_pf) prefetch_ahead(w, rb, o, k, n_out);
        if (!lp_dot_row1xk(type, k, w + o * rb, rb, n_in, &xp->xr, 0, self_pf ? pass_ahead(rb, o, k, n_out) : 0, acc))
            break;
        for (int j = 0; j < k; j++) put(y + o + j, acc[j], accumulate);
    }
    for (; o < o1; o++) { /* each weight row against the n activation rows */
        const uint8_t *row = w + o * rb;
        if (!self_pf) prefetch_ahead(w, rb, o, 1, n_out);
        if (n > 1 && lp_row1z_rows(type, row, n_in, &xp->xr, 0, (int)n, acc)) { /* decoded once for all rows */
            for (int64_t r = 0; r < n; r++) put(y + r * ldy + o, acc[r], accumulate);
            continue;
        }
        if (lp_dot_row1(type, row, n_in, &xp->xr, 0, self_pf ? pass_ahead(rb, o, 1, n_out) : 0, acc)) { /* x86 K-quants: the one-row kernel per row */
            put(y + o, acc[0], accumulate);
            for (int64_t r = 1; r < n; r++) {
                lp_dot_row1(type, row, n_in, &xp->xr, r, 0, acc);
                put(y + r * ldy + o, acc[0], accumulate);
            }
            continue;
        }
        lp_unpack_row(type, row, n_in, wr);
        for (int64_t r = 0; r < n; r++) put(y + r * ldy + o, lp_dot_row(g16, has_min, wr, &xp->xr, r), accumulate);
    }
}

/* The product of lp_mm with its output rows split among the threads of the enclosing
 * parallel region (an orphaned `omp for`); xp prepared by lp_prep_for; scratch: this thread's
 * lp_mm_scratch_bytes(n_in). */
void lp_mm_for(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const lp_xprep *xp, float *y, int64_t ldy,
               int accumulate, void *scratch) {
#if defined(LP_AMX)
    if (xp->reads & LP_READS_AMXK) { /* (lp_xprep_reads: Q4_K / Q5_K prompts) */
#pragma omp for schedule(static)
        for (int64_t o0 = 0; o0 < n_out; o0 += LP_AMX_ROWS)
            lp_amxk_chunk(type, w, o0, o0 + LP_AMX_ROWS < n_out ? o0 + LP_AMX_ROWS : n_out, n_in, xp, y, ldy, accumulate, scratch);
        return;
    }
    if (takes_amx(type, n_in, xp)) { /* LP_AMX_ROWS output rows a task: the activation tiles reused from L2 */
#pragma omp for schedule(static)
        for (int64_t o0 = 0; o0 < n_out; o0 += LP_AMX_ROWS)
            lp_amx_chunk(type, w, o0, o0 + LP_AMX_ROWS < n_out ? o0 + LP_AMX_ROWS : n_out, n_in, xp, y, ldy, accumulate, scratch);
        return;
    }
#endif
    const int64_t ch = task_rows(type, n_out, n_in, xp->n); /* mm_lanes.h: CHUNK, wider for a wide product in lanes */
#pragma omp for schedule(static)
    for (int64_t o0 = 0; o0 < n_out; o0 += ch)
        mm_chunk(type, w, o0, o0 + ch < n_out ? o0 + ch : n_out, n_out, n_in, xp, y, ldy, accumulate, scratch);
}
/* Output rows o0..o1 (o1 - o0 <= LP_MM_CHUNK, o0 a multiple of it) of lp_mm_for's product, for a
 * caller that hands out its own tasks (moe_rows.c: (expert, chunk) pairs). */
void lp_mm_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xprep *xp,
                 float *y, int64_t ldy, int accumulate, void *scratch) {
    mm_chunk(type, w, o0, o1, n_out, n_in, xp, y, ldy, accumulate, scratch);
}

/* Do n rows of n_in, prepared by lp_xprep_at, take the lanes (lanes_chunk) in a product of this
 * type (moe_rows.c: such an expert's rows may take amxw_x86.c's tiles instead, the same sums)? */
int lp_mm_takes_lanes(int type, int64_t n_in, int64_t n) {
#if defined(LP_LANES)
    return (lp_xprep_ints(lp_xprep_reads(type, n_in, n), LP_READS_INTS | LP_READS_BF16) & LP_READS_INTS) &&
           !twin_ints(n_in, n) && lanes_ints(n_in, n);
#else
    (void)type, (void)n_in, (void)n;
    return 0;
#endif
}

/* Does a product of n rows of n_in of this type take the AVX2 level's int8 lanes (lanes8_chunk:
 * x as ggml's Q8_0, tests/test_lanes8.py), as lp_mm and the fused layers give it? */
int lp_lanes8_takes(int type, int64_t n_in, int64_t n) {
#if defined(LP_LANES8)
    return lp_lanes8_type(type) && (lp_xprep_reads(type, n_in, n) & LP_READS_INTS) && (lanes8_rows(n_in, n) || rows8_few(n_in, n));
#else
    (void)type, (void)n_in, (void)n;
    return 0;
#endif
}

/* y[r, o] (+)= sum_k x[r, k] W[o, k]: x float [n_rows, n_in], W [n_out, n_in] in blocks of
 * `type`, y float rows of stride ldy.  Block types: integer products on int16 activations (see
 * lp.h); float types: fp32.  Returns 0, or -1 when scratch memory could not be allocated. */
static int mm(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
              int64_t ldy, int accumulate, int glu) {
    if (n_rows == 1 && lp_row1_i8(type, n_in)) /* one row in int8 (row1_x86.h) */
        return lp_mm_det(type, w, n_out, n_in, x, n_rows, y, ldy, accumulate);
    const int reads = lp_xprep_reads(type, n_in, n_rows);
    void *xbuf = malloc(xprep_bytes(n_in, n_rows, reads));
    if (!xbuf) return -1;
    lp_xprep xp = xprep_at(xbuf, n_in, n_rows, x, reads);
    if (!lp_reads_q8k(type)) xp.xr.q8 = NULL; /* no Q8_K rows prepared (lp_prepare_x_row) */
    if (!lp_lanes8_type(type)) xp.xl8.n_grp = 0, xp.x8.q = NULL; /* nor int8 lanes or rows (lp_lanes_for, lp_prep_row) */
    int failed = 0;
#pragma omp parallel
    {
        void *scratch = malloc(lp_mm_scratch_bytes(n_in));
        lp_prep_for(&xp);
        if (glu) {
#pragma omp single
            for (int64_t r = 0; r < n_rows; r++) lp_force_q8k_row(&xp, r);
        }
        if (scratch) {
            lp_mm_for(type, w, n_out, n_in, &xp, y, ldy, accumulate, scratch);
        } else {
#pragma omp atomic write
            failed = 1;
        }
        free(scratch);
    }
    free(xbuf);
    return failed ? -1 : 0;
}
int lp_mm(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
          int64_t ldy, int accumulate) {
    return mm(type, w, n_out, n_in, x, n_rows, y, ldy, accumulate, 0);
}
/* lp_mm of ffn_down's input (GLU rows): in Q8_K whatever their largest value (layers.c prep_ff_row). */
int lp_mm_glu(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
              int64_t ldy, int accumulate) {
    return mm(type, w, n_out, n_in, x, n_rows, y, ldy, accumulate, 1);
}

/* Rows r0..r1 of W [n_out, n_in] as float [r1 - r0, n_in]: ggml's dequantization. */
void lp_dequant(int type, const uint8_t *w, int64_t n_in, int64_t r0, int64_t r1, float *out) {
    const int64_t rb = lp_row_bytes(type, n_in);
#pragma omp parallel
    {
        void *scratch = malloc(lp_wrow_bytes(n_in));
        lp_wrow wr = lp_wrow_at(scratch, n_in);
#pragma omp for schedule(static)
        for (int64_t r = r0; r < r1; r++) lp_row_to_f32(type, w + r * rb, n_in, out + (r - r0) * n_in, wr);
        free(scratch);
    }
}

/* The same rows rounded to bfloat16 (round to nearest even; weights hold no NaNs). */
void lp_dequant_bf16(int type, const uint8_t *w, int64_t n_in, int64_t r0, int64_t r1, uint16_t *out) {
    const int64_t rb = lp_row_bytes(type, n_in);
#pragma omp parallel
    {
        void *scratch = malloc(lp_wrow_bytes(n_in) + (size_t)n_in * 4);
        lp_wrow wr = lp_wrow_at(scratch, n_in);
        float *t = (float *)((char *)scratch + lp_wrow_bytes(n_in));
#pragma omp for schedule(static)
        for (int64_t r = r0; r < r1; r++) {
            lp_row_to_f32(type, w + r * rb, n_in, t, wr);
            uint16_t *o = out + (r - r0) * n_in;
            for (int64_t k = 0; k < n_in; k++) o[k] = lp_f32_to_bf16(t[k]);
        }
        free(scratch);
    }
}

/* Rows ids[0..n) of W as float [n, n_in] (ggml_get_rows: the token embeddings). */
void lp_get_rows(int type, const uint8_t *w, int64_t n_in, const int64_t *ids, int64_t n, float *out) {
    const int64_t rb = lp_row_bytes(type, n_in);
    void *scratch = malloc(lp_wrow_bytes(n_in));
    lp_wrow wr = lp_wrow_at(scratch, n_in);
    for (int64_t i = 0; i < n; i++) lp_row_to_f32(type, w + ids[i] * rb, n_in, out + i * n_in, wr);
    free(scratch);
}
