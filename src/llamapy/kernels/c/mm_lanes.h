/* Static functions for two translation units, mm.c (the default products) and rows_det_x86.c
 * (--deterministic's, which reduce in the same lanes' order), so that they inline into each:
 * the output rows of a chunk from x86's lanes (lanes_x86.c), in one lane group a pass
 * (lanes_chunk) or at AVX-512 in twin lanes (twin_chunk), and their scratch.  The includer
 * defines CHUNK and put() first. */
#ifndef LP_MM_LANES_H
#define LP_MM_LANES_H

#define LANES_TW 4 /* weight rows per lane tile, at most (lp_lanes_tile writes 4 columns, those past nw zeros) */
#define LANES_NW 16 /* weight rows a lane chunk holds decoded at once (its scratch: LANES_NW lanes_row_bytes) */
#ifndef LANES_L2_BYTES
#define LANES_L2_BYTES (512 << 10) /* a chunk's lanes past which they take LANES_NW rows a pass (lanes_chunk) */
#endif
#define YB_LD (CHUNK + 4) /* a buffered row's floats: a tile's four columns stay inside it from any column < CHUNK */
#define LANES_YB (512 * YB_LD) /* floats of a chunk's buffered outputs (512 rows: lanes_slice_rows) */
#ifndef LANES_WIDE
#define LANES_WIDE 128 /* output rows per task of a wide product in lanes (lp_mm_for: task_rows) */
#endif
static size_t lanes_row_bytes(int64_t n_in) { return lp_wrow_bytes(n_in) + (size_t)n_in * 2 + 128; }
#define TWIN_NP 4 /* weight-row pairs per twin tile */
/* a twin pair: ab int32 [n_in] and dm float [4 n_in / 16] (lp_twin_pair), 64-byte aligned */
static size_t twin_pair_bytes(int64_t n_in) { return (size_t)n_in * 4 + (size_t)(n_in / 16) * 16 + 128; }

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

/* A chunk's buffered outputs (yb: n rows ybld apart, columns o0..o1) into y's rows (+)=, 8 at
 * a time in registers (a memcpy call a row had been 4-10% of a 16-row product of 640, B=16's
 * Q8_0 output), and the lines of the chunk after (the same thread's: lp_mm_for's static
 * schedule) requested: y's rows lie a row of the matrix apart, each line a miss (a hint: a
 * prefetch past the array's end does not fault). */
static void put_buffered(const float *yb, int64_t ybld, int64_t n, int64_t o0, int64_t o1, float *y, int64_t ldy,
                         int accumulate) {
    const int64_t m = o1 - o0;
    for (int64_t r = 0; r < n; r++) {
        float *yr = y + r * ldy + o0;
        const float *br = yb + r * ybld;
        for (int64_t k = m; k < 2 * m; k += 16) __builtin_prefetch(yr + k, 1, 3);
        int64_t k = 0;
#if defined(LP_AVX512)
        for (; k + 16 <= m; k += 16) { /* a line a store (two halves: a 16-row Q8_0 product 5% slower than memcpy) */
            __m512 v = _mm512_loadu_ps(br + k);
            __asm__("" : "+v"(v)); /* opaque: GCC made y = yb's rows a memcpy call each again (3% of a 512-row det
                                    * Q4_K product of 640 x 1024) */
            _mm512_storeu_ps(yr + k, accumulate ? _mm512_add_ps(_mm512_loadu_ps(yr + k), v) : v);
        }
#endif
        for (; k + 8 <= m; k += 8) {
            __m256 v = _mm256_loadu_ps(br + k);
            __asm__("" : "+x"(v)); /* (as above) */
            _mm256_storeu_ps(yr + k, accumulate ? _mm256_add_ps(_mm256_loadu_ps(yr + k), v) : v);
        }
        for (; k < m; k++) {
            float v = br[k];
            __asm__("" : "+x"(v));
            yr[k] = accumulate ? yr[k] + v : v;
        }
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
/* A lane tile's weight rows for this type: 4; at AVX2 on Intel 3 for the types of one scale per
 * block of 32 or 32-group (two groups' 2 x 3 chains and sums, 2 activation vectors and a weight
 * pair fit its 16 ymm registers, where 4 rows spilled: kernel_ab.py --rows 8..32 -t 2, the 2-core
 * Intel Xeon (KVM, family 6 model 167), 1.01-1.15x; the 16-groups' types lost 3-7% at 16-32 rows);
 * on AMD 4 (lp_lanes_amd: Q8_0 2048x640 -t 1 --cpu-time on the 2-core EPYC Zen 3, family 0x19
 * model 1: 1.04x at 16 rows, 1.06x at 32, 1.07x at 8; the float sums spilled once a block cost
 * less than the fourth row's shared activation loads saved). */
static int lanes_tile_rows(int g16) {
#if defined(LP_AVX512)
    (void)g16;
    return 4;
#else
    return g16 || lp_lanes_amd() ? 4 : 3;
#endif
}
/* Lane groups in a tile's pass with `left` groups to go: 2 where there are two, at AVX-512 3 for the
 * types of a scale per block of 32 (LP_LANES_NG3), except from 4 left (2 + 2, not 3 + a lone group
 * of one: its chains wait on their latency).  The sums do not depend on it. */
static int lanes_pass_groups(int64_t left, int g16) {
#if defined(LP_LANES_NG3)
    if (!g16 && left >= 3 && left != 4) return 3;
#endif
    (void)g16;
    return left >= 2 ? 2 : 1;
}
/* Output rows o0..o1 from the lanes (lanes_x86.c): up to LANES_NW weight rows at a time decoded to
 * int16 once (lp_unpack_row16, or the canonical form widened), then each pass of two or three
 * groups of LP_NL activation rows against all of them, lanes_tile_rows a tile: a pass's lanes
 * (2-3 x 64 KiB at 2048 a row) read from memory once for the LANES_NW rows, not once per tile (a
 * slice's 256 rows of 2048 fill a 1 MiB L2: each tile's sweep over them had come from L3). */
static void lanes_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xprep *xp,
                        float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t rb = lp_row_bytes(type, n_in), n = xp->n, n_grp = xp->xl.n_grp;
    const int g16 = lp_g16(type), has_min = lp_has_min(type);
    const int tw = lanes_tile_rows(g16);
    /* rows decoded at once: LANES_NW where the lanes outgrow L2 (LANES_L2_BYTES), each pass's from memory once;
     * else a tile's, each row's int16 staying in L1 (16 rows, 64 KiB at 2048, had left it: 96-row Q4_0 0.96x) */
    const int64_t sub = n_grp * LP_NL * n_in * 2 > LANES_L2_BYTES && lanes_pass_groups(n_grp, g16) < n_grp ? LANES_NW : tw;
    const int64_t ahead = sub > 2 * tw ? sub : 2 * tw;
    lp_wrow wr[LANES_NW];
    int16_t *w16[LANES_NW];
    lane_rows_at(scratch, n_in, (int)(o1 - o0 < sub ? o1 - o0 : sub), wr, w16); /* (a call each: only those read) */
    float t[3 * LP_NL * 4];
    float yb[LANES_YB]; /* the chunk's outputs in rows [n_pad][ybld]: y's rows lie ldy apart (often a multiple of
                         * 4 KiB: the same cache sets), so each row's part is written once, in one piece */
    const int64_t n_pad = n_grp * LP_NL, ybld = o1 - o0 + 4; /* a buffered row: the chunk's columns and a tile's 4 */
    const int buffered = n_pad * ybld <= LANES_YB;
#if defined(LP_LANES_DEC)
    const int dec = type == LP_Q8_0; /* the first pass decodes the rows (lp_lanes_tile's raw) */
#else
    const int dec = 0;
#endif
    for (int64_t os = o0; os < o1; os += sub) { /* rows os..oe decoded (dec: by the first pass) */
        const int64_t oe = o1 - os < sub ? o1 : os + sub;
        for (int64_t o = os; o < oe && !dec; o++) row16(type, w + o * rb, n_in, &wr[o - os], w16[o - os]);
        for (int64_t g = 0, ng; g < n_grp; g += ng) { /* two or three groups of LP_NL rows a pass */
            ng = lanes_pass_groups(n_grp - g, g16);
            for (int64_t o = os; o < oe; o += tw) { /* (a column past nw: the next tile's, written after, or padding) */
                const int nw = (int)(oe - o < tw ? oe - o : tw), j0 = (int)(o - os);
                const char *pf = NULL; /* weight rows on their way while a pass computes: dec's first pass decodes
                                        * them two tiles ahead; else the last pass requests the rows `ahead` */
                const int64_t pf_lines = dec ? (g == 0 ? tile_prefetch(w, rb, o + 2 * tw, o + 3 * tw, n_out, &pf) : 0)
                                             : (g + ng >= n_grp ? tile_prefetch(w, rb, o + ahead, o + ahead + tw, n_out, &pf) : 0);
                const uint8_t *raw = dec && g == 0 ? w + o * rb : NULL;
                const int16_t *const *wt = (const int16_t *const *)w16 + j0;
                if (buffered) { /* rows LP_NL g .., columns o - o0 .. o - o0 + 3 of the chunk */
                    lp_lanes_tile(ng, nw, g16, has_min, raw, rb, wt, wr + j0, &xp->xl, g, pf, pf_lines,
                                  yb + LP_NL * g * ybld + (o - o0), ybld);
                    continue;
                }
                lp_lanes_tile(ng, nw, g16, has_min, raw, rb, wt, wr + j0, &xp->xl, g, pf, pf_lines, t, 4);
                for (int64_t i = 0; i < LP_NL * ng && LP_NL * g + i < n; i++)
                    for (int j = 0; j < nw; j++) put(y + (LP_NL * g + i) * ldy + o + j, t[4 * i + j], accumulate);
            }
        }
    }
    if (buffered) put_buffered(yb, ybld, n, o0, o1, y, ldy, accumulate);
}
#endif

#if defined(LP_LANES8)
/* Output rows o0..o1 from the int8 lanes (lanes8_x86.c; mm.c lanes8_takes): weight rows decoded to
 * unsigned bytes once (lp_unpack_row8_32), then against every group of LP_NL activation rows, two
 * groups a pass (2 weight rows a tile: 2 x 2 pairs of int16 and int32 sums, 4 float accumulators
 * in 16 ymm), a lone group 4; the outputs buffered as lanes_chunk's.  Each weight row's bytes, d
 * and m in one lanes_row_bytes(n_in) of the scratch (n_in + n_in / 4 + 64 bytes needed). */
static void lanes8_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xprep *xp,
                         float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t rb = lp_row_bytes(type, n_in), n = xp->n, nb = n_in / 32, ng = xp->xl8.n_grp;
    uint8_t *u8[LANES_TW];
    float *d[LANES_TW], *m[LANES_TW];
    for (int j = 0; j < LANES_TW; j++) {
        u8[j] = (uint8_t *)(((uintptr_t)((char *)scratch + j * lanes_row_bytes(n_in)) + 63) & ~(uintptr_t)63);
        d[j] = (float *)(u8[j] + n_in);
        m[j] = d[j] + nb;
    }
    float t[2 * LP_NL * 4];
    float yb[LANES_YB];
    const int64_t ybld = o1 - o0 + 4;
    const int buffered = ng * LP_NL * ybld <= LANES_YB;
    const int tw = ng >= 2 ? 2 : 4;
    for (int64_t o = o0; o < o1; o += tw) {
        const int nw = (int)(o1 - o < tw ? o1 - o : tw);
        for (int j = 0; j < nw; j++) lp_unpack_row8_32(type, w + (o + j) * rb, n_in, u8[j], d[j], m[j]);
        for (int64_t g = 0; g < ng; g += 2) {
            const int ngp = g + 1 < ng ? 2 : 1;
            const char *pf = NULL;
            const int64_t pf_lines = g == 0 ? tile_prefetch(w, rb, o + 2 * tw, o + 3 * tw, n_out, &pf) : 0;
            float *yt = buffered ? yb + LP_NL * g * ybld + (o - o0) : t;
            lp_lanes8_tile(type, ngp, nw, (const uint8_t *const *)u8, (const float *const *)d, (const float *const *)m,
                           &xp->xl8, g, pf, pf_lines, yt, buffered ? ybld : 4);
            if (buffered) continue;
            for (int64_t i = 0; i < LP_NL * ngp && LP_NL * g + i < n; i++)
                for (int j = 0; j < nw; j++) put(y + (LP_NL * g + i) * ldy + o + j, t[4 * i + j], accumulate);
        }
    }
    if (buffered) put_buffered(yb, ybld, n, o0, o1, y, ldy, accumulate);
}
#endif

/* lp_mm_for's output rows per task: CHUNK, or LANES_WIDE for a product of n >= LP_F32_ROWS rows in
 * lanes (Q8_0's int16: lanes_chunk; the 32-blocks' int8: lanes8_chunk; both take any o1 - o0, no
 * other path of these types at these rows keeps a CHUNK-wide buffer) that is wide (8 tasks a
 * thread or more) and whose buffered outputs fit: a chunk's setup (the path's choice, the scratch's
 * rows) paid once per LANES_WIDE rows, and each y row's part written as 4 lines, not 1 (Gemma 3's
 * tied 262144 x 640 output at B=16: 16384 tasks of 16).  The sums do not depend on it. */
static int64_t task_rows(int type, int64_t n_out, int64_t n_in, int64_t n) {
#if defined(LP_LANES) && !defined(LP_AVX512) /* (AVX2; AVX-512's twin lanes and AMX not measured) */
    const int64_t n_pad = (n + LP_NL - 1) / LP_NL * LP_NL;
    if ((type == LP_Q8_0 || lp_lanes8_type(type)) && n >= LP_F32_ROWS && n_in % 32 == 0 && n_pad * (LANES_WIDE + 4) <= LANES_YB &&
        n_out >= (int64_t)LANES_WIDE * 8 * omp_get_num_threads())
        return LANES_WIDE;
#endif
    (void)type, (void)n_out, (void)n_in, (void)n;
    return CHUNK;
}

#endif /* LP_MM_LANES_H */
