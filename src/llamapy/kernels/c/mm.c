/* The products y (+)= x W^T of few activation rows against a weight matrix kept in its GGUF
 * blocks, and the conversions around them (dequantization, embedding rows).
 *
 * Exported (ctypes, see kernels/build.py): lp_mm, lp_dequant, lp_dequant_bf16, lp_get_rows.
 * Internal, for a caller's own parallel region (layers.c): lp_prep_for + lp_mm_for. */
#include <omp.h>

#include "lp.h"

#define CHUNK 16 /* output rows per task */

/* Which products of n rows of n_in take the integer products (int16 activations: the one-row
 * arithmetic), so that every level computes the same integers for a row count?
 *   up to LP_FEW_ROWS rows: from LP_F32_ROWS rows on AVX-512 in twin lanes, at AVX2 in one
 *     group of lanes (lanes_x86.c); fewer rows, and elsewhere, dot.c's one-row products row by row;
 *   LP_LANES_ROWS rows or more: on x86 in lanes, elsewhere row by row.
 * The rows between take the fp32 tiles, and a bf16 CPU's coarse types bf16 tiles from
 * LP_F32_ROWS rows (lp_xprep_reads).  (On x86 the lanes beat the fp32 tiles at 8 rows and from
 * 16: benchmarks/kernel_ab.py --rows.) */
#define LP_LANES_ROWS 16
static int many_ints(int64_t n_in, int64_t n) { return n_in % 32 == 0 && n >= LP_LANES_ROWS; }

#if defined(LP_LANES)
/* The few rows that x86 multiplies in lanes: twin lanes at AVX-512, one lane group at AVX2. */
static int few_lanes(int64_t n_in, int64_t n) { return n_in % 32 == 0 && n >= LP_F32_ROWS && n <= LP_FEW_ROWS; }
static int twin_ints(int64_t n_in, int64_t n) {
#if defined(LP_TWIN)
    return few_lanes(n_in, n);
#else
    (void)n_in, (void)n;
    return 0;
#endif
}
/* x86 products in (16- or 8-) lanes: many rows, and at AVX2 the few too */
static int lanes_ints(int64_t n_in, int64_t n) {
#if defined(LP_TWIN)
    return many_ints(n_in, n);
#else
    return many_ints(n_in, n) || few_lanes(n_in, n);
#endif
}
#endif

static size_t lanes_bytes(int64_t n_in, int64_t n) {
#if defined(LP_LANES)
    return lanes_ints(n_in, n) || twin_ints(n_in, n) ? lp_xlanes_bytes(n_in, n) : 0;
#else
    (void)n_in, (void)n;
    return 0;
#endif
}

/* The bytes after the bf16 rows: the lanes, or with LP_READS_AMX the hi / lo rows (16-row tiles). */
static size_t tail_bytes(int64_t n_in, int64_t n, int reads) {
    return reads & LP_READS_AMX ? 2 * (size_t)((n + 15) / 16 * 16 * n_in) + 64 : lanes_bytes(n_in, n);
}

static size_t xprep_bytes(int64_t n_in, int64_t n, int reads) {
    return lp_xrows_bytes(n_in, n) + (size_t)(n * n_in) * 2 + 64 + tail_bytes(n_in, n, reads);
}

/* xp's buffers in buf (xprep_bytes(n_in, n, reads) bytes) for the forms `reads`. */
static lp_xprep xprep_at(void *buf, int64_t n_in, int64_t n, const float *x, int reads) {
    lp_xprep p;
    memset(&p.xl, 0, sizeof p.xl);
    p.xr = lp_xrows_at(buf, n_in, n);
    p.xb = (uint16_t *)(((uintptr_t)((char *)buf + lp_xrows_bytes(n_in, n)) + 63) & ~(uintptr_t)63);
    char *tail = (char *)buf + lp_xrows_bytes(n_in, n) + (size_t)(n * n_in) * 2 + 64;
    p.xhi = p.xlo = NULL;
    if (reads & LP_READS_AMX) {
        p.xhi = (int8_t *)(((uintptr_t)tail + 63) & ~(uintptr_t)63);
        p.xlo = p.xhi + (n + 15) / 16 * 16 * n_in;
    }
#if defined(LP_LANES)
    else if (lanes_bytes(n_in, n)) p.xl = lp_xlanes_at(tail, n_in, n);
#endif
    p.x = x;
    p.n = n;
    p.n_in = n_in;
    p.reads = reads;
    return p;
}

size_t lp_xprep_bytes(int64_t n_in, int64_t n) { return xprep_bytes(n_in, n, LP_READS_INTS | LP_READS_BF16); }

lp_xprep lp_xprep_at(void *buf, int64_t n_in, int64_t n, const float *x) {
    return xprep_at(buf, n_in, n, x, LP_READS_INTS | LP_READS_BF16);
}

/* Do a bf16 CPU's coarse types take bf16 from LP_F32_ROWS rows on (1), or the integer products
 * as the other types do (0)?  Which is faster depends on the core, not on its features: on a
 * 2-core Intel Xeon (KVM, family 6 model 167) SmolLM2 Q4_1's 8-row verification took 33.8 ms in
 * bf16 and 17.9 in integers.  Set once when the library is loaded, from a timing of both
 * (kernels/calibrate.py), before any product runs. */
static int coarse_bf16 = 1;
void lp_set_coarse_bf16(int on) { coarse_bf16 = on; }
int lp_coarse_bf16(void) { return coarse_bf16; }

/* The forms of x a product of this type reads (mm_chunk's choice): bf16 rows for a bf16 CPU's
 * coarse types from LP_F32_ROWS to LP_DENSE_ROWS - 1 rows (where coarse_bf16), the integer
 * form for the other block types and for every many-row product. */
static int lp_xprep_reads(int type, int64_t n_in, int64_t n) {
    if (n >= LP_F32_ROWS && n < LP_DENSE_ROWS && coarse_bf16 && lp_bf16_rows(type, n_in)) return LP_READS_BF16;
    if (lp_is_float(type)) return 0;
    const int g16 = lp_g16(type); /* (their tile pairs do half a block) */
    return n >= LP_DENSE_ROWS && many_ints(n_in, n) && !g16 && lp_amx_on() ? LP_READS_INTS | LP_READS_AMX : LP_READS_INTS;
}

/* Does row r of x need preparing (the integer products take it)? */
int lp_needs_prep(const lp_xprep *xp) {
    return xp->n_in % 32 == 0 && (xp->n <= LP_FEW_ROWS || xp->n >= LP_LANES_ROWS);
}

/* Row r of xp as the products read it: int16, bf16 for several on a bf16 CPU (the lanes are
 * laid out from the int16 rows afterwards: lp_lanes_for). */
void lp_prep_row(lp_xprep *xp, int64_t r) {
    if ((xp->reads & LP_READS_INTS) && lp_needs_prep(xp)) lp_prepare_x_row(xp->x + r * xp->n_in, xp->xr, r);
#if defined(LP_AMX)
    if (xp->reads & LP_READS_AMX) lp_amx_split_row(xp->xr.q + r * xp->n_in, xp->n_in, xp->xhi + r * xp->n_in, xp->xlo + r * xp->n_in);
#endif
#if defined(LP_BF16)
    if ((xp->reads & LP_READS_BF16) && xp->n >= LP_F32_ROWS && xp->n_in % 32 == 0)
        lp_to_bf16(xp->x + r * xp->n_in, xp->n_in, xp->xb + r * xp->n_in);
#endif
}

/* xp's rows (xp->x [n, n_in]) prepared for the products, split among the threads of the
 * enclosing parallel region (which meet after it). */
void lp_prep_for(lp_xprep *xp) {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < xp->n; r++) lp_prep_row(xp, r);
    lp_lanes_for(xp);
}

/* On x86, where the products take lanes: xp's int16 rows (every row prepared: called after the
 * rows' loop and its barrier) laid out in lanes, the blocks of 32 split among the threads, each
 * writing whole vectors (rows split among threads would share every vector's cache line). */
void lp_lanes_for(const lp_xprep *xp) {
#if defined(LP_LANES)
    const int64_t nb = xp->n_in / 32;
    const int lanes = lanes_ints(xp->n_in, xp->n), twin = twin_ints(xp->n_in, xp->n);
    if (!(xp->reads & LP_READS_INTS) || (xp->reads & LP_READS_AMX) || !(lanes || twin)) return;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nb; b++) lp_xlanes_fill(&xp->xr, xp->n, xp->xl, b, twin ? 2 : 1);
#else
    (void)xp;
#endif
}

#define LANES_NW 4 /* weight rows per lane tile, at most (lp_lanes_tile writes 4 columns, those past nw zeros) */
/* A lane tile's weight rows for this type: 4; at AVX2 3 for the types of one scale per block of
 * 32 or 32-group (two groups' 2 x 3 chains and sums, 2 activation vectors and a weight pair fit
 * its 16 ymm registers, where 4 rows spilled: kernel_ab.py --rows 8..32 -t 2, the 2-core Intel
 * Xeon (KVM, family 6 model 167), 1.01-1.15x; the 16-groups' types lost 3-7% at 16-32 rows). */
static int lanes_tile_rows(int g16) {
#if defined(LP_AVX512)
    (void)g16;
    return 4;
#else
    return g16 ? 4 : 3;
#endif
}
#define YB_LD (CHUNK + 4) /* a buffered row's floats: a tile's four columns stay inside it from any column < CHUNK */
#define LANES_YB (512 * YB_LD) /* floats of a chunk's buffered outputs (512 rows: lanes_slice_rows) */
static size_t lanes_row_bytes(int64_t n_in) { return lp_wrow_bytes(n_in) + (size_t)n_in * 2 + 128; }
#define TWIN_NP 4 /* weight-row pairs per twin tile */
/* a twin pair: ab int32 [n_in] and dm float [4 n_in / 16] (lp_twin_pair), 64-byte aligned */
static size_t twin_pair_bytes(int64_t n_in) { return (size_t)n_in * 4 + (size_t)(n_in / 16) * 16 + 128; }

size_t lp_mm_scratch_bytes(int64_t n_in) {
    const size_t tiles = lp_wrow_bytes(n_in) + LP_TW * (size_t)n_in * 6 + 192, lane_rows = LANES_NW * lanes_row_bytes(n_in);
    const size_t twins = 2 * lanes_row_bytes(n_in) + TWIN_NP * twin_pair_bytes(n_in);
    size_t most = tiles > lane_rows ? tiles : lane_rows;
    most = most > twins ? most : twins;
#if defined(LP_AMX)
    most = most > lp_amx_scratch_bytes(n_in) ? most : lp_amx_scratch_bytes(n_in);
#endif
    return most;
}

static inline void put(float *y, float v, int accumulate) { *y = accumulate ? *y + v : v; }

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

#if defined(LP_LANES)
/* The cache lines of weight rows b..e (e capped at n_out) from *pf: what a lane tile requests,
 * spread over its blocks, while it computes. */
static int64_t tile_prefetch(const uint8_t *w, int64_t rb, int64_t b, int64_t e, int64_t n_out, const char **pf) {
    e = e < n_out ? e : n_out;
    *pf = (const char *)(((uintptr_t)(w + b * rb)) & ~(uintptr_t)63);
    return e > b ? ((const char *)(w + e * rb) - *pf + 63) / 64 : 0;
}

/* k weight rows' room in a lane chunk's scratch: wr[j] (canonical form) and w16[j] (int16). */
static void lane_rows_at(void *scratch, int64_t n_in, int k, lp_wrow *wr, int16_t **w16) {
    for (int j = 0; j < k; j++) {
        char *at = (char *)scratch + j * lanes_row_bytes(n_in);
        wr[j] = lp_wrow_at(at, n_in);
        w16[j] = (int16_t *)(((uintptr_t)(at + lp_wrow_bytes(n_in)) + 63) & ~(uintptr_t)63);
    }
}

/* A weight row decoded to int16 once for every activation row: straight from its blocks
 * (lp_unpack_row16), or through the canonical form widened. */
static void row16(int type, const uint8_t *row, int64_t n_in, lp_wrow *wr, int16_t *w16) {
    if (lp_unpack_row16(type, row, n_in, w16, wr->d16, wr->m16)) return;
    lp_unpack_row(type, row, n_in, *wr);
    lp_widen_q(wr->q, n_in, w16);
}
#endif

#if defined(LP_TWIN)
/* Output rows o0..o1 from the twin lanes (lanes_x86.c): 2 TWIN_NP weight rows at a time, each
 * decoded to int16 once (as lanes_chunk) and paired with its neighbour (an odd last row with
 * itself), against the n <= LP_FEW_ROWS rows in one vector. */
static void twin_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xprep *xp,
                       float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t rb = lp_row_bytes(type, n_in), n = xp->n;
    const int g16 = lp_g16(type), has_min = lp_has_min(type);
    lp_wrow wr[2];
    int16_t *w16[2];
    lane_rows_at(scratch, n_in, 2, wr, w16);
    int32_t *ab[TWIN_NP];
    float *dm[TWIN_NP];
    for (int j = 0; j < TWIN_NP; j++) {
        char *at = (char *)(((uintptr_t)((char *)scratch + 2 * lanes_row_bytes(n_in) + j * twin_pair_bytes(n_in)) + 63) &
                            ~(uintptr_t)63);
        ab[j] = (int32_t *)at;
        dm[j] = (float *)(at + (size_t)n_in * 4);
    }
    float t[16 * TWIN_NP];
    for (int64_t o = o0; o < o1; o += 2 * TWIN_NP) {
        const int nw = (int)(o1 - o < 2 * TWIN_NP ? o1 - o : 2 * TWIN_NP), np = (nw + 1) / 2;
        for (int j = 0; j < np; j++) {
            const int two = 2 * j + 1 < nw;
            const uint8_t *ra = w + (o + 2 * j) * rb;
            if (lp_unpack_pair16(type, ra, two ? ra + rb : ra, n_in, ab[j], dm[j])) continue;
            for (int h = 0; h < 1 + two; h++) row16(type, ra + h * rb, n_in, &wr[h], w16[h]);
            lp_twin_pair(w16[0], w16[two], &wr[0], &wr[two], n_in, ab[j], dm[j]);
        }
        const char *pf; /* the next tile's weight rows on their way while this one computes */
        const int64_t pf_lines = tile_prefetch(w, rb, o + 2 * TWIN_NP, o + 4 * TWIN_NP, n_out, &pf);
        lp_twin_tile(np, g16, has_min, (const int32_t *const *)ab, (const float *const *)dm, &xp->xl, pf, pf_lines, t);
        for (int j = 0; j < nw; j++) /* lane 2 r + (j & 1) of pair j / 2: row r, output column o + j */
            for (int64_t r = 0; r < n; r++) put(y + r * ldy + o + j, t[16 * (j / 2) + 2 * r + (j & 1)], accumulate);
    }
}
#endif

#if defined(LP_LANES)
/* Output rows o0..o1 from the lanes (lanes_x86.c): lanes_tile_rows weight rows at a time decoded to
 * int16 once (lp_unpack_row16, or the canonical form widened), then against every group of
 * LP_NL activation rows, two groups a pass. */
static void lanes_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xprep *xp,
                        float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t rb = lp_row_bytes(type, n_in), n = xp->n;
    const int g16 = lp_g16(type), has_min = lp_has_min(type);
    lp_wrow wr[LANES_NW];
    int16_t *w16[LANES_NW];
    lane_rows_at(scratch, n_in, LANES_NW, wr, w16);
    float t[2 * LP_NL * 4];
    float yb[LANES_YB]; /* the chunk's outputs in rows [n_pad][YB_LD]: y's rows lie ldy apart (often a multiple of
                         * 4 KiB: the same cache sets), so each row's part is written once, in one piece */
    const int64_t n_pad = xp->xl.n_grp * LP_NL;
    const int buffered = n_pad * YB_LD <= LANES_YB;
    const int tw = lanes_tile_rows(g16);
    for (int64_t o = o0; o < o1; o += tw) {
        const int nw = (int)(o1 - o < tw ? o1 - o : tw);
        for (int j = 0; j < nw; j++) row16(type, w + (o + j) * rb, n_in, &wr[j], w16[j]);
        for (int64_t g = 0; g < xp->xl.n_grp; g += 2) { /* two groups of LP_NL rows a pass where there are */
            const int ng = g + 1 < xp->xl.n_grp ? 2 : 1;
            const char *pf = NULL; /* the weight rows two tiles ahead on their way while the first pass computes */
            const int64_t pf_lines = g == 0 ? tile_prefetch(w, rb, o + 2 * tw, o + 3 * tw, n_out, &pf) : 0;
            if (buffered) { /* rows LP_NL g .., columns o - o0 .. o - o0 + 3 of the chunk (a column past nw: the next
                             * tile's, written after, or the row's padding) */
                lp_lanes_tile(ng, nw, g16, has_min, (const int16_t *const *)w16, wr, &xp->xl, g, pf, pf_lines,
                              yb + LP_NL * g * YB_LD + (o - o0), YB_LD);
                continue;
            }
            lp_lanes_tile(ng, nw, g16, has_min, (const int16_t *const *)w16, wr, &xp->xl, g, pf, pf_lines, t, 4);
            for (int64_t i = 0; i < LP_NL * ng && LP_NL * g + i < n; i++)
                for (int j = 0; j < nw; j++) put(y + (LP_NL * g + i) * ldy + o + j, t[4 * i + j], accumulate);
        }
    }
    if (buffered)
        for (int64_t r = 0; r < n; r++) {
            float *yr = y + r * ldy + o0;
            const float *br = yb + r * YB_LD;
            if (accumulate)
                for (int64_t k = 0; k < o1 - o0; k++) yr[k] += br[k];
            else
                memcpy(yr, br, sizeof(float) * (size_t)(o1 - o0));
        }
}
#endif

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
 * Q4_1 3072 x 576 one row streamed 0.93 ns a block at 1.4 KB ahead, 0.74-0.82 at 2.9-8.6 KB. */
#define LP_PF_AHEAD 3072
LP_INLINE void prefetch_ahead(const uint8_t *w, int64_t rb, int64_t o, int64_t k, int64_t n_out) {
    const char *end = (const char *)(w + n_out * rb), *e = (const char *)(w + (o + k) * rb) + LP_PF_AHEAD;
    for (const char *p = (const char *)(((uintptr_t)(w + o * rb + LP_PF_AHEAD)) & ~(uintptr_t)63); p < e && p < end; p += 64)
        LP_PREFETCH_W(p);
}

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
    const int reads = lp_xprep_reads(type, n_in, n);
    const int ints = (reads & LP_READS_INTS) && (n <= LP_FEW_ROWS || many_ints(n_in, n));
#if defined(LP_AMX)
    if (ints && (xp->reads & LP_READS_AMX)) { /* a prompt's product on AMX tiles */
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
    int64_t o = o0;
    for (; n == 1 && o + 2 <= o1; o += 2) { /* two weight rows per pass where the type has such a path */
        prefetch_ahead(w, rb, o, 2, n_out);
        if (!lp_dot_row1x2(type, w + o * rb, w + (o + 1) * rb, n_in, &xp->xr, 0, acc)) break;
        put(y + o, acc[0], accumulate);
        put(y + o + 1, acc[1], accumulate);
    }
    for (; o < o1; o++) { /* each weight row against the n activation rows */
        const uint8_t *row = w + o * rb;
        prefetch_ahead(w, rb, o, 1, n_out);
        if (n > 1 && lp_dot_rows_x(type, row, n_in, &xp->xr, 0, (int)n, acc)) { /* decoded once for all rows */
            for (int64_t r = 0; r < n; r++) put(y + r * ldy + o, acc[r], accumulate);
            continue;
        }
        if (lp_dot_row1(type, row, n_in, &xp->xr, 0, acc)) { /* x86 K-quants: the one-row kernel per row */
            put(y + o, acc[0], accumulate);
            for (int64_t r = 1; r < n; r++) {
                lp_dot_row1(type, row, n_in, &xp->xr, r, acc);
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
#pragma omp for schedule(static)
    for (int64_t o0 = 0; o0 < n_out; o0 += CHUNK)
        mm_chunk(type, w, o0, o0 + CHUNK < n_out ? o0 + CHUNK : n_out, n_out, n_in, xp, y, ldy, accumulate, scratch);
}

/* y[r, o] (+)= sum_k x[r, k] W[o, k]: x float [n_rows, n_in], W [n_out, n_in] in blocks of
 * `type`, y float rows of stride ldy.  Block types: integer products on int16 activations (see
 * lp.h); float types: fp32.  Returns 0, or -1 when scratch memory could not be allocated. */
int lp_mm(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
          int64_t ldy, int accumulate) {
    const int reads = lp_xprep_reads(type, n_in, n_rows);
    void *xbuf = malloc(xprep_bytes(n_in, n_rows, reads));
    if (!xbuf) return -1;
    lp_xprep xp = xprep_at(xbuf, n_in, n_rows, x, reads);
    int failed = 0;
#pragma omp parallel
    {
        void *scratch = malloc(lp_mm_scratch_bytes(n_in));
        lp_prep_for(&xp);
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
