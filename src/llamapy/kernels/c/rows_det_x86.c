/* Deterministic mode's products (x86): y (+)= x W^T for any number of activation rows, where
 * every output element y[r, o] is the same bits whatever the row count and the other rows.
 * The order is the lanes' (lanes_x86.c): per (row, output) and block of 32 (16-group for the
 * g16 types) the exact integer sum of the canonical weights times the row's int16, then
 * acc = fmaf((float)isum, d16 * s, acc) (+ fmaf(xsum, m16, acc) with a minimum), in block
 * order; each lane of the lane kernels is one row's sequence, alone (the activations are
 * quantized per row, lp_prepare_x_row; a lane past the last row is zeros and never read).
 *   1 row: det1_x86.c, that sequence for 8 outputs at once (the one-row kernel of decode);
 *   2-8 rows at AVX-512: the twin lanes (twin_chunk: per lane the same float steps);
 *   otherwise the 16- (AVX2: 8-) lane tiles (lanes_chunk), in slices of DET_SLICE rows.
 * Integer addition is associative, so how a kernel orders the integers does not matter;
 * which kernel a row count takes does not change a bit (tests/test_deterministic_kernels.py:
 * many rows against each row alone, both levels).  No path here chooses by the batch's data
 * (q8mm_x86.c) or rounds the activations otherwise (AMX, bf16, fp32 tiles); the output rows split
 * among the threads in chunks of CHUNK (any split: the same bits).  Q4_K / Q6_K at AVX-512 VNNI
 * without AMX choose per row by its own values (kz_chunk, det_kz_x86.c): q8kz's order in Q8_K.
 * The 32-element types at AVX-512 take det8_x86.c instead (int8 activations, vpdpbusd;
 * lp_det_reads): the same contract, their own order, with VNNI and no AMX from 128 rows on the
 * prompt's int8 panels (det_panel_x86.c, LP_DET_PANEL32); at AVX2 every covered type does
 * (det8_avx2_x86.c: vpmaddubsw + vpmaddwd, the K-quants' d sc and -(dmin m) per sub-block), but a
 * few rows each take their one-row kernel (det8_row_x86.c), more rows det8's order in the prompt's
 * int8 panels (det_panel_x86.c, from per-type row counts) or in the int16 lanes (det_lanes16: Q8_0
 * below the panels, Q6_K at 8-31 rows).  From LP_DENSE_ROWS rows Q4_K / Q5_K take
 * AMX's tiles where the CPU has them (amx_x86.c: the lanes' bits, fewer instructions), and so do
 * det8's types (det8_amx_x86.c: det8's bits; lp_x8.tiles, set here for the whole product).
 * Other types (and non-x86 builds) return LP_DET_UNCOVERED (mm_det_x86.c, lp_mm_det and which types
 * this file covers): the caller keeps one-row ubatches. */
#include <omp.h>

#include "rows_det_x86.h"

#include "amx_x86.h"
#include "det1_x86.h"
#include "det8_amx_x86.h"
#include "det8_row_x86.h"
#include "det_kz_x86.h"
#include "x8_lanes16_x86.h"
#include "row1q8k_x86.h"
#include "lanes8_x86.h"
#include "det_panel_x86.h"
#include "quants.h"
#include "unpack_x86.h"

#define CHUNK LP_MM_CHUNK /* output rows per task */
#ifndef DET_ALONE
#define DET_ALONE 4 /* AVX2: up to this many rows each take the one-row kernel (Q6_K 2; 5 not measured) */
#endif
#define DET_SLICE 256     /* rows per pass of the lanes over a chunk (their lanes stay in L2: mm.c's slices) */
/* the same for det8's int8 lanes: up to 384 KiB of them (512 rows of 576, 256 of 1536), at most 512 rows */
static int64_t det8_slice(int64_t n_in) {
    const int64_t r = (393216 / n_in) & ~(int64_t)15;
    return r < 16 ? 16 : r > 512 ? 512 : r;
}

static inline void put(float *y, float v, int accumulate) { *y = accumulate ? *y + v : v; }

#include "mm_lanes.h"
#include "det_lanes8_x86.h"

#if defined(LP_LANES)
/* n rows take the twin lanes (one row in two lanes of one group)? */
static int det_twin(int64_t n) {
#if defined(LP_TWIN)
    return n >= 2 && n <= LP_FEW_ROWS;
#else
    (void)n;
    return 0;
#endif
}

/* Does a prompt-sized product of this type (LP_DENSE_ROWS rows or more) take AMX's tiles?  They
 * give the lanes' integers and float steps bit for bit (amx_x86.c; the types of a scale per 32
 * that det8 leaves: Q4_K, Q5_K), so which path a row count takes changes no bit, as the lanes'
 * slices do not (tests/test_deterministic_kernels.py: 530 rows against each row alone). */
static int det_amx_type(int type) {
#if defined(LP_AMX)
    return !lp_det8_covers(type) && !lp_g16(type) && lp_amx_on();
#else
    (void)type;
    return 0;
#endif
}

/* Does a product of this type read xp's int16 lanes made from det8's int8 rows (x8_lanes16), not
 * det8's own tiles?  At AVX2, from 2 rows: det8's order per (row, output) is the lanes' float step
 * (lanes_x86.c tile: acc = fmaf((float)isum, d_w * d_x, acc) per block of 32 -- Q6_K per 16-group,
 * d_x its block's -- in block order, then fmaf(sum_x, m_w, acc) with a minimum; isum exact), so fed
 * det8's int8 x widened to int16, det8's d_x and sum_x (d_x * qs), the default's lanes (lanes_chunk:
 * 4 weight rows a tile on AMD, Q8_0 decoded in the tile, buffered puts) give det8's bits.  det8's
 * d_w, m_w are the canonical rows' d16, m16 (unpack_x86.c: the same float products).  Not where xl
 * holds xr's rows (LP_READS_INTS / AMX).  Against det8_avx2_x86.c's tile, -t 1 thread CPU time on the
 * 2-core EPYC Zen 3 (AVX2): Q8_0 2048 x 640 1.28x at 2 rows .. 1.27x at 32, 1.11x at 512, Gemma 3's
 * 262144 x 640 output 1.31x at 16 (the default's time); Q6_K 640 x 2048 1.04x at 2, 1.17x at 32. */
static int det_lanes16(int type, const lp_xprep *xp) {
#if !defined(LP_AVX512) && !defined(LP_AVXVNNI) /* (AVX-VNNI's det8 tile, vpdpbusd a quad: not measured against these) */
    /* (Q4_K, Q5_K in these lanes: no faster at 2-16 rows, slower from 32; the 4- and 5-bit 32-element
     * types: det8's tile is the default's int8 lanes8 tile already; prompts, LP_DENSE_ROWS rows on: the
     * products 1.08-1.11x at 512 rows, but every input's lanes filled, read or not -- Gemma 3 270M
     * Q4_K_M's pp512 0.99x, decode_ab.py -t 1 --cpu-time) */
    return (type == LP_Q8_0 || type == LP_Q6_K) && xp->n >= 2 && xp->n < LP_DENSE_ROWS && (xp->reads & LP_READS_I8) &&
           !(xp->reads & (LP_READS_INTS | LP_READS_AMX)) && !xp->x8.tiles;
#else
    (void)type, (void)xp;
    return 0;
#endif
}

/* The forms a product of this type reads: LP_READS_I8 (det8_x86.c), LP_READS_AMX (the int16 rows,
 * from LP_DENSE_ROWS rows split for AMX, else in lanes) or LP_READS_INTS (the int16 rows, lanes). */
int lp_det_reads(int type) {
    if (det_lanes8_rows(type)) return type == LP_Q4_0 || type == LP_Q4_1 ? LP_READS_L8_4 : LP_READS_L8_5;
    return lp_det8_covers(type) ? LP_READS_I8 : lp_det_kz_type(type) ? LP_READS_Q8K | LP_READS_INTS : det_amx_type(type) ? LP_READS_AMX : LP_READS_INTS;
}

/* AMX's hi / lo rows (16-row tiles) for a product of n rows: LP_DENSE_ROWS or more, else none. */
static size_t det_amx_bytes(int64_t n_in, int64_t n) {
#if defined(LP_AMX)
    return n >= LP_DENSE_ROWS ? 2 * (size_t)((n + 15) / 16 * 16 * n_in) + 64 : 0;
#else
    (void)n_in, (void)n;
    return 0;
#endif
}

static size_t det_head_bytes(int64_t n_in, int64_t n) {
    return lp_xrows_bytes(n_in, n) + (n > 1 ? lp_xlanes_bytes(n_in, n) : 0) + 64 + lp_x8_bytes(n_in, n) + 64 + lp_det_kz_bytes(n_in, n);
}

size_t lp_det_xprep_bytes(int64_t n_in, int64_t n) { return det_head_bytes(n_in, n) + det_amx_bytes(n_in, n) + det_l8_bytes(n_in, n); }

lp_xprep lp_det_xprep_at(void *buf, int64_t n_in, int64_t n, const float *x) {
    lp_xprep p;
    memset(&p, 0, sizeof p);
    p.xr = lp_xrows_at(buf, n_in, n);
    if (n > 1) p.xl = lp_xlanes_at((char *)buf + lp_xrows_bytes(n_in, n), n_in, n);
    p.x8 = lp_x8_at((char *)buf + lp_xrows_bytes(n_in, n) + (n > 1 ? lp_xlanes_bytes(n_in, n) : 0) + 64, n_in, n);
    lp_det_kz_at(&p.xr, (char *)buf + det_head_bytes(n_in, n) - lp_det_kz_bytes(n_in, n)); /* (Q8_K rows: LP_READS_Q8K) */
    p.xhi = p.xlo = NULL;
#if defined(LP_AMX)
    p.x8.tiles = n >= LP_DENSE_ROWS && lp_amx_on(); /* det8's types on AMX's tiles: no int8 lanes */
    if (det_amx_bytes(n_in, n) && lp_amx_on()) {
        p.xhi = (int8_t *)(((uintptr_t)((char *)buf + det_head_bytes(n_in, n)) + 63) & ~(uintptr_t)63);
        p.xlo = p.xhi + (n + 15) / 16 * 16 * n_in;
    }
#endif
#if defined(LP_LANES8) /* (after the AMX rows: none at these counts) */
    if (det_l8_bytes(n_in, n)) p.xl8 = lp_xlanes8_at((char *)buf + det_head_bytes(n_in, n) + det_amx_bytes(n_in, n), n_in, n);
#endif
    p.x = x;
    p.n = n;
    p.n_in = n_in;
    p.reads = LP_READS_INTS;
    return p;
}

/* xp's rows (all prepared: after the rows' loop and its barrier) laid out in lanes, the
 * blocks split among the threads; one row reads its row itself, AMX its split rows. */
void lp_det_lanes_for(const lp_xprep *xp) {
    if (xp->n < 2) return;
    const int lanes = (xp->reads & LP_READS_INTS) || ((xp->reads & LP_READS_AMX) && !xp->xhi);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < xp->n_in / 32; b++) {
        if (lanes) lp_xlanes_fill(&xp->xr, xp->n, xp->xl, b, det_twin(xp->n) ? 2 : 1);
        if (det_reads_x8(xp) && !lp_det_panel_all(xp->n)) lp_x8_lanes_block(&xp->x8, b); /* (the panels read q) */
#if defined(LP_LANES8)
        if (det_reads_l8(xp)) lp_xlanes8_fill(xp->x, xp->n, xp->xl8, b); /* (det_lanes8_rows) */
#endif
#if !defined(LP_AVX512)
        if (det_lanes16(LP_Q8_0, xp) && !lp_det_panel_all(xp->n)) lp_x8_lanes16(&xp->x8, xp->xl, b); /* (for any such product of the rows) */
#endif
    }
}

/* Row r of xp (its fp32 row made) in the forms xp->reads names. */
void lp_det_prep_row(const lp_xprep *xp, int64_t r) {
    lp_xrows xr = xp->xr;
    if (!(xp->reads & LP_READS_Q8K)) xr.q8 = NULL; /* (Q8_K only where a product reads it) */
    if (xp->reads & (LP_READS_INTS | LP_READS_AMX)) lp_prepare_x_row(xp->x + r * xp->n_in, xr, r);
    else if (xr.q8) lp_prepare_q8k_row(xp->x + r * xp->n_in, xr, r);
#if defined(LP_AMX)
    if ((xp->reads & LP_READS_AMX) && xp->xhi)
        lp_amx_split_row(xp->xr.q + r * xp->n_in, xp->n_in, r, xp->xhi, xp->xlo);
#endif
    if (det_reads_x8(xp)) lp_x8_row(xp->x + r * xp->n_in, &xp->x8, r);
}

void lp_det_prep_for(lp_xprep *xp) {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < xp->n; r++) lp_det_prep_row(xp, r);
    lp_det_lanes_for(xp);
}

size_t lp_det_scratch_bytes(int64_t n_in) {
    const size_t lanes = LANES_NW * lanes_row_bytes(n_in), one = lp_det1_scratch_bytes(n_in);
    const size_t twins = 2 * lanes_row_bytes(n_in) + TWIN_NP * twin_pair_bytes(n_in);
    size_t most = lanes > twins ? lanes : twins;
    const size_t i8 = lp_det8_scratch_bytes(n_in);
    most = most > one ? most : one;
    most = most > i8 ? most : i8;
    most = most > lp_det_panel_scratch_bytes(n_in) ? most : lp_det_panel_scratch_bytes(n_in);
#if defined(LP_AMX)
    most = most > lp_amx_scratch_bytes(n_in) ? most : lp_amx_scratch_bytes(n_in);
    most = most > lp_det8_amx_scratch_bytes(n_in) ? most : lp_det8_amx_scratch_bytes(n_in);
#endif
    return most;
}

/* Rows r0..r0 + n of xp (r0 a multiple of LP_NL) as a product of their own: the lanes' groups
 * from r0 / LP_NL. */
static lp_xprep det_slice(const lp_xprep *xp, int64_t r0, int64_t n) {
    lp_xprep s = *xp;
    const int64_t g = r0 / LP_NL, nb = xp->n_in / 32;
    s.n = n;
    s.xl.n_grp = (n + LP_NL - 1) / LP_NL;
    s.xl.q += g * LP_NL * (xp->n_in / 2);
    s.xl.s += g * LP_NL * nb;
    s.xl.sum32 += g * LP_NL * nb;
    s.xl.sum16 += g * LP_NL * 2 * nb;
    return s;
}

/* Output rows o0..o1 of a Q4_K / Q6_K product (lp_det_kz_type): each row with q8on (no outlier block, or a
 * SwiGLU row: lp_det_kz_force) in q8kz's order (det_kz_x86.c), each other row (noff of them) in the int16
 * lanes' (one row det1, a few the twins, more the lanes: one sequence), so a row's bits depend on its own
 * values alone.  The int16 kernels run on every row of a slice into yb, their rows with q8on dropped. */
static void kz_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_xprep *xp, int64_t noff,
                     float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t n = xp->n, n_in = xp->n_in, rb = lp_row_bytes(type, n_in), no = o1 - o0;
    lp_det_kz_chunk(type, w, o0, o1, n_out, n_in, &xp->xr, n, y, ldy, accumulate);
    float yb[DET_SLICE * CHUNK]; /* [row of the slice][o - o0] */
    const uint8_t *wo = w + o0 * rb; /* (the kernels see outputs 0..no of n_out - o0) */
    for (int64_t r0 = 0; r0 < n && noff; r0 += DET_SLICE) {
        const int64_t m = n - r0 < DET_SLICE ? n - r0 : DET_SLICE;
        int any = 0;
        for (int64_t i = 0; i < m; i++) any |= !xp->xr.q8on[r0 + i];
        if (!any) continue;
        if (n == 1) lp_det1_chunk(type, wo, 0, no, n_out - o0, n_in, &xp->xr, yb, 0, scratch);
#if defined(LP_TWIN)
        else if (det_twin(n)) twin_chunk(type, wo, 0, no, n_out - o0, n_in, xp, yb, CHUNK, 0, scratch);
#endif
        else {
            const lp_xprep s = det_slice(xp, r0, m);
            lanes_chunk(type, wo, 0, no, n_out - o0, n_in, &s, yb, CHUNK, 0, scratch);
        }
        for (int64_t i = 0; i < m; i++)
            if (!xp->xr.q8on[r0 + i])
                for (int64_t o = 0; o < no; o++) put(y + (r0 + i) * ldy + o0 + o, yb[i * CHUNK + o], accumulate);
    }
}

void lp_mm_det_for(int type, const uint8_t *w, int64_t n_out, const lp_xprep *xp, float *y, int64_t ldy, int accumulate,
                   void *scratch) {
    const int64_t n = xp->n, n_in = xp->n_in;
    if (lp_det_kz_type(type)) { /* Q4_K / Q6_K at AVX-512 VNNI without AMX: each row by its own q8on */
        int64_t noff = 0;
        for (int64_t r = 0; r < n; r++) noff += !xp->xr.q8on[r];
        if (noff < n) {
#pragma omp for schedule(static)
            for (int64_t o0 = 0; o0 < n_out; o0 += CHUNK)
                kz_chunk(type, w, o0, o0 + CHUNK < n_out ? o0 + CHUNK : n_out, n_out, xp, noff, y, ldy, accumulate, scratch);
            return;
        } /* (every row with an outlier block: the int16 lanes' paths below, straight into y) */
    }
#if !defined(LP_AVX512)
    const int alone = type == LP_Q6_K ? 1 : type == LP_Q4_K || type == LP_Q5_K ? 2 : DET_ALONE;
    if (n >= 2 && n <= alone && lp_det8_covers(type) && !xp->x8.tiles) { /* each row its one-row
        * kernel, its bits by definition: against det8's tile and the lanes, -t 1 thread CPU time on the Zen 3, Q8_0 2048 x 640
        * 2.0x / 1.4x / 1.1x at 2 / 3 / 4 rows, Q5_0 2.2x / 1.9x / 1.6x (lp_det8_rows); against the panels (det_panel_x86.c)
        * Q4_K 640 x 2048 1.27x at 2, 0.93x / 0.77x at 3 / 4, Q6_K 0.97x at 2 */
#pragma omp for schedule(static)
        for (int64_t o0 = 0; o0 < n_out; o0 += CHUNK) {
            const int64_t o1 = o0 + CHUNK < n_out ? o0 + CHUNK : n_out;
            if (lp_lanes8_type(type)) { /* det8_row_x86.c: 2..4 rows, each block of 8 weight rows decoded once */
                lp_det8_rows(type, w, o0, o1, n_out, &xp->x8, (int)n, y, ldy, accumulate);
                continue;
            }
            for (int64_t r = 0; r < n; r++) {
                const lp_x8 one = lp_x8_slice(&xp->x8, r, 1); /* (its lanes unread: one row) */
                lp_det8_chunk(type, w, o0, o1, n_out, &one, y + r * ldy, ldy, accumulate, scratch);
            }
        }
        return;
    }
#endif
#if defined(LP_LANES8)
    if (n > DET_ALONE && n <= det_lanes8_rows(type) && det_reads_l8(xp)) { /* det8's bits */
        const int64_t ch = task_rows(type, n_out, n_in, n); /* (as lp_mm_for) */
#pragma omp for schedule(static)
        for (int64_t o0 = 0; o0 < n_out; o0 += ch)
            lanes8_chunk(type, w, o0, o0 + ch < n_out ? o0 + ch : n_out, n_out, n_in, xp, y, ldy, accumulate, scratch);
        return;
    }
#endif
    const int panel = lp_det8_covers(type) && lp_det_panel_covers(type, n_in, n); /* det8's bits on the prompt's panels */
    if (panel && lp_det_panel_for(type, w, n_out, &xp->x8, y, ldy, accumulate, scratch) == 0) return;
    if (!panel && det_lanes16(type, xp)) { /* the default's lanes on det8's rows (x8_lanes16), det8's bits
        * (not after a panel that fell back: it refilled det8's lanes, not these) */
        for (int64_t r0 = 0; r0 < n; r0 += DET_SLICE) {
            const lp_xprep s = det_slice(xp, r0, n - r0 < DET_SLICE ? n - r0 : DET_SLICE);
            const int64_t ch = task_rows(type, n_out, n_in, s.n); /* mm_lanes.h: LANES_WIDE for a wide one, as lp_mm_for */
#pragma omp for schedule(static) nowait
            for (int64_t o0 = 0; o0 < n_out; o0 += ch)
                lanes_chunk(type, w, o0, o0 + ch < n_out ? o0 + ch : n_out, n_out, n_in, &s, y + r0 * ldy, ldy, accumulate, scratch);
        }
#pragma omp barrier
        return;
    }
    if (lp_det8_covers(type)) { /* xp->reads has LP_READS_I8 (lp_det_reads), or its L8 bit past det_lanes8_rows */
#if defined(LP_AMX)
        if (xp->x8.tiles) { /* LP_DENSE_ROWS rows or more: all of them against 16 weight rows a task */
#pragma omp for schedule(static)
            for (int64_t o0 = 0; o0 < n_out; o0 += CHUNK)
                lp_det8_amx_chunk(type, w, o0, o0 + CHUNK < n_out ? o0 + CHUNK : n_out, &xp->x8, y, ldy, accumulate, scratch);
            return;
        }
#endif
        const int64_t sl = det8_slice(n_in);
        for (int64_t r0 = 0; r0 < n; r0 += sl) {
            const lp_x8 s = n > 1 ? lp_x8_slice(&xp->x8, r0, n - r0 < sl ? n - r0 : sl) : xp->x8;
#pragma omp for schedule(static) nowait
            for (int64_t o0 = 0; o0 < n_out; o0 += CHUNK)
                lp_det8_chunk(type, w, o0, o0 + CHUNK < n_out ? o0 + CHUNK : n_out, n_out, &s, y + r0 * ldy, ldy, accumulate, scratch);
        }
#pragma omp barrier
        return;
    }
#if defined(LP_AMX)
    if (xp->xhi && det_amx_type(type)) { /* xp->reads has LP_READS_AMX: the rows split */
#pragma omp for schedule(static)
        for (int64_t o0 = 0; o0 < n_out; o0 += LP_AMX_ROWS)
            lp_amx_chunk(type, w, o0, o0 + LP_AMX_ROWS < n_out ? o0 + LP_AMX_ROWS : n_out, n_in, xp, y, ldy, accumulate, scratch);
        return;
    }
#endif
    if (n == 1) {
#pragma omp for schedule(static)
        for (int64_t o0 = 0; o0 < n_out; o0 += CHUNK)
            lp_det1_chunk(type, w, o0, o0 + CHUNK < n_out ? o0 + CHUNK : n_out, n_out, n_in, &xp->xr, y, accumulate, scratch);
        return;
    }
#if defined(LP_TWIN)
    if (det_twin(n)) {
#pragma omp for schedule(static)
        for (int64_t o0 = 0; o0 < n_out; o0 += CHUNK)
            twin_chunk(type, w, o0, o0 + CHUNK < n_out ? o0 + CHUNK : n_out, n_out, n_in, xp, y, ldy, accumulate, scratch);
        return;
    }
#endif
    for (int64_t r0 = 0; r0 < n; r0 += DET_SLICE) { /* no barrier between slices: they write other rows */
        const lp_xprep s = det_slice(xp, r0, n - r0 < DET_SLICE ? n - r0 : DET_SLICE);
#pragma omp for schedule(static) nowait
        for (int64_t o0 = 0; o0 < n_out; o0 += CHUNK)
            lanes_chunk(type, w, o0, o0 + CHUNK < n_out ? o0 + CHUNK : n_out, n_out, n_in, &s, y + r0 * ldy, ldy, accumulate,
                        scratch);
    }
#pragma omp barrier
}
#else
size_t lp_det_xprep_bytes(int64_t n_in, int64_t n) { return (size_t)(n_in * n) * 0 + 64; }
lp_xprep lp_det_xprep_at(void *buf, int64_t n_in, int64_t n, const float *x) {
    lp_xprep p;
    memset(&p, 0, sizeof p);
    (void)buf, (void)n_in, (void)n, (void)x;
    return p;
}
int lp_det_reads(int type) { return (void)type, LP_READS_INTS; }
void lp_det_lanes_for(const lp_xprep *xp) { (void)xp; }
void lp_det_prep_row(const lp_xprep *xp, int64_t r) { (void)xp, (void)r; }
void lp_det_prep_for(lp_xprep *xp) { (void)xp; }
size_t lp_det_scratch_bytes(int64_t n_in) { return (size_t)n_in * 0 + 64; }
void lp_mm_det_for(int type, const uint8_t *w, int64_t n_out, const lp_xprep *xp, float *y, int64_t ldy, int accumulate,
                   void *scratch) {
    (void)type, (void)w, (void)n_out, (void)xp, (void)y, (void)ldy, (void)accumulate, (void)scratch;
}
#endif
