/* Prompt-sized products of Q4_K and Q5_K (and Q6_K: pack_group_q6) on AMX tiles with a float
 * step per super-block of 256 values instead of one per block of 32 (amx_x86.c's, whose tile
 * stores and float steps, 8 a super-block, bound it far below the tile unit's rate).
 *
 * A Q4_K / Q5_K weight is d sc_b q - dmin m_b: q unsigned (4 or 5 bits), sc_b and m_b the
 * block's 6-bit integers, d and dmin the super-block's.  The activations are ggml's Q8_K, which
 * llama.cpp multiplies Q4_K / Q5_K by: one scale per super-block, s = max |x| / 127, xq = x / s
 * rounded, int8 (one tile), so a super-block's integer dot sum_b sc_b (q_b . xq_b) is one tile
 * sum if the weights carry sc_b: w' = sc_b q (at most 63 x 31 = 1953) split into int8 halves,
 * w' = 2^sh u + v (sh = the q's bits: u <= 61, v < 2^sh).  Two int32 tiles a super-block (x.u,
 * x.v over K = 256, each at most 256 x 127 x 61: exact), combined 2^sh xu + xv in int32 (at most
 * 256 x 127 x 1953 < 2^26: exact), times d s in float; the minima from xq's block sums, as
 * llama.cpp's bsums: + sum_b (-dmin m_b) s sum(xq_b), so the product is w . (s xq) whole (with
 * x's own sums the offset d sc q carries weighted the rounding: 3x llama.cpp's KLD on Gemma 3).
 * The 8 tile registers hold
 * 2 x 2: two activation row-tiles x the group's u, v (4 int32, 2 A, 2 B tiles), so per 16 x 16
 * outputs and super-block 8 tdpbssd of K = 64, 8 tile loads, 2 tile stores.
 *
 * Precision: xq rounds x to 1/254 of its super-block's largest value, as llama.cpp's (the lanes':
 * int16, 1/65278 of their block's); Gemma 3 270M's KLD from llama.cpp's logits 0.0053 (the int16
 * rows: 0.0046; docs/kernels.md).  Not the lanes' sums bit for bit, so deterministic mode
 * (rows_det_x86.c) keeps amx_x86.c. */
#include "amxk_x86.h"

#include "amx_x86.h"
#include "quants.h"

static int amxk_on = 1;
__attribute__((constructor)) static void amxk_init(void) {
    const char *env = getenv("LLAMAPY_AMXK");
    amxk_on = !(env && env[0] == '0');
}
int lp_amxk_set(int on) { return amxk_on = on; }

int lp_amxk_covers(int type, int64_t n_in) {
    return amxk_on && lp_amx_on() && n_in % 256 == 0 && (type == LP_Q4_K || type == LP_Q5_K || type == LP_Q6_K);
}

#if defined(LP_AMX)
void lp_amxk_prep_row(const lp_xprep *xp, int64_t r) {
    const int64_t n_in = xp->n_in, nb = n_in / 32, ns = n_in / 256;
    const float *x = xp->x + r * n_in;
    for (int64_t k0 = 0; k0 < n_in; k0 += 256) {
        __m512 amax = _mm512_setzero_ps();
        for (int64_t k = k0; k < k0 + 256; k += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
        const float m = _mm512_reduce_max_ps(amax), s = m / LP_AMXK_QMAX;
        const __m512 inv = _mm512_set1_ps(m > 0.0f ? LP_AMXK_QMAX / m : 0.0f);
        xp->xr.s[r * ns + k0 / 256] = s;
        for (int64_t k = k0; k < k0 + 256; k += 32) {
            const __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + 16);
            /* xq = x / s rounded to nearest even, |xq| <= 127 (the saturation never bites) */
            const __m512i ia = _mm512_cvtps_epi32(_mm512_mul_ps(a, inv)), ib = _mm512_cvtps_epi32(_mm512_mul_ps(b, inv));
            /* the block's sum for the minima: of xq, times s (ggml's bsums), not of x: the minima
             * then cancel the offset d sc q carries, and the error is w . (xq s - x) */
            xp->xr.sum32[r * nb + k / 32] = s * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(ia, ib));
            const __m128i qa = _mm512_cvtsepi32_epi8(ia);
            const __m128i qb = _mm512_cvtsepi32_epi8(ib);
            _mm256_storeu_si256((__m256i *)(xp->xhi + LP_AMXK_AT(n_in, r, k)), _mm256_set_m128i(qb, qa));
        }
    }
}

/* A group of 16 weight rows: u and v int32 [n_in / 4][16] (per 4 consecutive k, the 16 rows'
 * 4 int8 side by side: AMX's B tiles), d [n_in / 256][16] the super-blocks' d, mn [n_in / 32][16]
 * the blocks' -dmin m. */
static size_t group_bytes(int64_t n_in) { return 32 * (size_t)n_in + 16 * 4 * (size_t)(n_in / 256 + n_in / 32); }

#define SLAB 128 /* activation rows a pass (chunk): their outputs accumulate in acc [SLAB][LP_AMX_ROWS] */

size_t lp_amxk_scratch_bytes(int64_t n_in) {
    return LP_AMX_GROUPS * group_bytes(n_in) + SLAB * LP_AMX_ROWS * 4 + 64;
}

/* ggml's get_scale_min_k4: block j's 6-bit scale and minimum from a super-block's 12 bytes */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* out[c] = dword c of r[0..15] (a 16 x 16 dword transpose, in place). */
LP_INLINE void transpose16(__m512i *r) {
    __m512i a[16], b[16];
    for (int p = 0; p < 8; p++) {
        a[2 * p] = _mm512_unpacklo_epi32(r[2 * p], r[2 * p + 1]);
        a[2 * p + 1] = _mm512_unpackhi_epi32(r[2 * p], r[2 * p + 1]);
    }
    for (int q = 0; q < 4; q++) { /* b[4q + s], 128-bit lane L: rows 4q .. 4q + 3 of dword 4L + s */
        b[4 * q] = _mm512_unpacklo_epi64(a[4 * q], a[4 * q + 2]);
        b[4 * q + 1] = _mm512_unpackhi_epi64(a[4 * q], a[4 * q + 2]);
        b[4 * q + 2] = _mm512_unpacklo_epi64(a[4 * q + 1], a[4 * q + 3]);
        b[4 * q + 3] = _mm512_unpackhi_epi64(a[4 * q + 1], a[4 * q + 3]);
    }
    for (int t = 0; t < 4; t++) { /* the 4 x 4 transpose of 128-bit lanes */
        const __m512i t0 = _mm512_shuffle_i32x4(b[t], b[4 + t], 0x44), t1 = _mm512_shuffle_i32x4(b[t], b[4 + t], 0xEE);
        const __m512i t2 = _mm512_shuffle_i32x4(b[8 + t], b[12 + t], 0x44), t3 = _mm512_shuffle_i32x4(b[8 + t], b[12 + t], 0xEE);
        r[t] = _mm512_shuffle_i32x4(t0, t2, 0x88);
        r[4 + t] = _mm512_shuffle_i32x4(t0, t2, 0xDD);
        r[8 + t] = _mm512_shuffle_i32x4(t1, t3, 0x88);
        r[12 + t] = _mm512_shuffle_i32x4(t1, t3, 0xDD);
    }
}

/* The 16 rows' u and v of 64 values (ru, rv: a row's 64 bytes each, in k order) into the B tiles'
 * order at value k of bu, bv. */
LP_INLINE void store_b(__m512i *ru, __m512i *rv, int64_t k, int32_t *bu, int32_t *bv) {
    transpose16(ru);
    transpose16(rv);
    for (int c = 0; c < 16; c++) {
        _mm512_store_si512(bu + 4 * k + 16 * c, ru[c]);
        _mm512_store_si512(bv + 4 * k + 16 * c, rv[c]);
    }
}

/* pack_group for Q6_K (ggml's block_q6_K: ql [128], qh [64], int8 scales [16] per 16 values, d):
 * w' = sc (q - 32), |w'| <= 128 x 32 = 4096, split w' = 64 u + v (u = w' >> 6 arithmetic, -64..64;
 * v = w' & 63), no minima.  Quarter p of a super-block (values 64p .. 64p + 63) is half h = p / 2's
 * ql [64h ..] low nibbles (p even) or high (p odd), with qh [32h ..] bits 2g, 2g + 1 for its
 * value groups g = 2 (p & 1) and g + 1 (32 values each), scales 8h + 2g (+1 for the second 16). */
static void pack_group_q6(const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, int32_t *bu, int32_t *bv, float *d) {
    const int64_t rb = lp_row_bytes(LP_Q6_K, n_in);
    const __m512i m4 = _mm512_set1_epi16(15), m3 = _mm512_set1_epi16(3), m6 = _mm512_set1_epi16(63), off = _mm512_set1_epi16(32);
    const __m512i lanes = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0); /* vpacksswb's qwords back in order */
    const int rows = (int)(o1 - o0);
    for (int64_t B = 0; B < n_in / 256; B++) {
        for (int j = 0; j < 16; j++) d[16 * B + j] = j < rows ? lp_f16_to_f32(*(const uint16_t *)(w + (o0 + j) * rb + B * 210 + 208)) : 0.0f;
        for (int p = 0; p < 4; p++) {
            const int h = p >> 1, g = 2 * (p & 1);
            __m512i ru[16], rv[16];
            for (int j = 0; j < 16; j++) {
                if (j >= rows) {
                    ru[j] = rv[j] = _mm512_setzero_si512();
                    continue;
                }
                const uint8_t *blk = w + (o0 + j) * rb + B * 210, *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
                const int8_t *sc = (const int8_t *)(blk + 192) + 8 * h + 2 * g;
                __m512i la = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)ql));
                __m512i lb = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(ql + 32)));
                const __m512i hq = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)qh));
                la = p & 1 ? _mm512_srli_epi16(la, 4) : _mm512_and_si512(la, m4);
                lb = p & 1 ? _mm512_srli_epi16(lb, 4) : _mm512_and_si512(lb, m4);
                /* (shift counts 2g, 2g + 2: constants per p after unrolling) */
                const __m512i ha = _mm512_and_si512(_mm512_srl_epi16(hq, _mm_cvtsi32_si128(2 * g)), m3);
                const __m512i hb = _mm512_and_si512(_mm512_srl_epi16(hq, _mm_cvtsi32_si128(2 * g + 2)), m3);
                const __m512i qa = _mm512_sub_epi16(_mm512_or_si512(la, _mm512_slli_epi16(ha, 4)), off);
                const __m512i qb = _mm512_sub_epi16(_mm512_or_si512(lb, _mm512_slli_epi16(hb, 4)), off);
                const __m512i sa = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(sc[0])), _mm256_set1_epi16(sc[1]), 1);
                const __m512i sb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(sc[2])), _mm256_set1_epi16(sc[3]), 1);
                const __m512i w0 = _mm512_mullo_epi16(qa, sa), w1 = _mm512_mullo_epi16(qb, sb);
                ru[j] = _mm512_permutexvar_epi64(lanes, _mm512_packs_epi16(_mm512_srai_epi16(w0, 6), _mm512_srai_epi16(w1, 6)));
                rv[j] = _mm512_permutexvar_epi64(lanes, _mm512_packs_epi16(_mm512_and_si512(w0, m6), _mm512_and_si512(w1, m6)));
            }
            store_b(ru, rv, 256 * B + 64 * p, bu, bv);
        }
    }
}

/* Weight rows o0..o1 (at most 16; the rest zero) as a group (group_bytes): per super-block each
 * row's scales decoded (sc [16][8], its d and -dmin m into d and mn), then per 64 values (a
 * pair of blocks: qs's low and high nibbles, Q5_K's qh bits 2p and 2p + 1) each row's
 * w' = sc q as 32 + 32 int16, their u and v bytes by a vpackuswb and a vpermq each, and the 16
 * rows' u and v by two 16 x 16 dword transposes into the B tiles' order.  (Decoding straight
 * from the blocks, not through lp_unpack_row8's bytes and float scales, and vpackuswb for
 * vpmovwb: the packing had been 22-31% of a 256-row / 160-row product.) */
static void pack_group(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, int32_t *bu, int32_t *bv,
                       float *d, float *mn) {
    if (type == LP_Q6_K) {
        pack_group_q6(w, o0, o1, n_in, bu, bv, d);
        return;
    }
    const int64_t rb = lp_row_bytes(type, n_in), bsz = type == LP_Q4_K ? 144 : 176, qs_at = type == LP_Q4_K ? 16 : 48;
    const int sh = type == LP_Q4_K ? 4 : 5, q5 = type == LP_Q5_K;
    const __m512i mask = _mm512_set1_epi16((short)((1 << sh) - 1)), m4 = _mm512_set1_epi16(15), one = _mm512_set1_epi16(1);
    const __m512i lanes = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0); /* vpackuswb's qwords back in order */
    const int rows = (int)(o1 - o0);
    for (int64_t B = 0; B < n_in / 256; B++) {
        uint8_t sc[16][8];
        for (int j = 0; j < 16; j++) {
            if (j >= rows) {
                memset(sc[j], 0, 8);
                d[16 * B + j] = 0.0f;
                for (int b = 0; b < 8; b++) mn[16 * (8 * B + b) + j] = 0.0f;
                continue;
            }
            const uint8_t *blk = w + (o0 + j) * rb + B * bsz;
            const float dmin = lp_f16_to_f32(*(const uint16_t *)(blk + 2));
            d[16 * B + j] = lp_f16_to_f32(*(const uint16_t *)blk);
            for (int b = 0; b < 8; b++) {
                int scb, m;
                scale_min_k4(b, blk + 4, &scb, &m);
                sc[j][b] = (uint8_t)scb;
                mn[16 * (8 * B + b) + j] = -(dmin * (float)m);
            }
        }
        for (int p = 0; p < 4; p++) {
            __m512i ru[16], rv[16];
            for (int j = 0; j < 16; j++) {
                if (j >= rows) {
                    ru[j] = rv[j] = _mm512_setzero_si512();
                    continue;
                }
                const uint8_t *blk = w + (o0 + j) * rb + B * bsz;
                const __m512i q = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk + qs_at + 32 * p)));
                __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_srli_epi16(q, 4);
                if (q5) {
                    const __m512i h = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(blk + 16)));
                    lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2 * p), one), 4));
                    hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2 * p + 1), one), 4));
                }
                const __m512i w0 = _mm512_mullo_epi16(lo, _mm512_set1_epi16((short)sc[j][2 * p]));
                const __m512i w1 = _mm512_mullo_epi16(hi, _mm512_set1_epi16((short)sc[j][2 * p + 1]));
                ru[j] = _mm512_permutexvar_epi64(lanes, _mm512_packus_epi16(_mm512_srli_epi16(w0, sh), _mm512_srli_epi16(w1, sh)));
                rv[j] = _mm512_permutexvar_epi64(lanes, _mm512_packus_epi16(_mm512_and_si512(w0, mask), _mm512_and_si512(w1, mask)));
            }
            store_b(ru, rv, 256 * B + 64 * p, bu, bv);
        }
    }
}

#ifndef LAGK
#define LAGK 2 /* items in flight: a tile store's bytes are read back this many items later */
#endif
#define T_0U 0 /* activation rows r0..r0 + 15 . u: 16 x 16 weight rows, int32 */
#define T_0V 1
#define T_1U 2 /* rows r0 + 16..r0 + 31 . u */
#define T_1V 3
#define T_A0 4 /* 16 activation rows x 64 int8 */
#define T_A1 5
#define T_BU 6 /* 16 rows of the 16 weight rows' 4 int8 */
#define T_BV 7

static void configure(void) {
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } __attribute__((packed)) c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) c.rows[t] = 16, c.colsb[t] = 64;
    _tile_loadconfig(&c);
}

/* One item: super-block B of up to 32 activation rows (slab rows m0..) by group j of 16 weight rows. */
typedef struct {
    int64_t m0, B;
    int mr, j;
    const float *d; /* the group's d of B */
} item;

/* An item's float step into acc [SLAB][LP_AMX_ROWS] (zeroed per slab): t its four stored tiles
 * [0u, 0v, 1u, 1v][16 x 16], s the slab's first row's scales. */
LP_INLINE void step(const int sh, const int32_t *t, const item *it, const float *s, int64_t ns, float *acc) {
    const __m512 d = _mm512_load_ps(it->d);
    for (int m = 0; m < it->mr; m++) {
        const int64_t r = it->m0 + m;
        float *ar = acc + r * LP_AMX_ROWS + 16 * it->j;
        const int32_t *tu = t + 512 * (m >> 4) + 16 * (m & 15);
        const __m512i u = _mm512_load_si512(tu), v = _mm512_load_si512(tu + 256);
        const __m512 p = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(u, sh), v)); /* (exact in int32) */
        _mm512_store_ps(ar, _mm512_fmadd_ps(p, _mm512_mul_ps(d, _mm512_set1_ps(s[r * ns + it->B])), _mm512_load_ps(ar)));
    }
}

/* Slab rows m0..m0+mr-1 (mr <= 4) done: acc's rows plus the minima (sum over blocks b of x's
 * block sums xs [.][nb] times mn [nb][LP_AMX_ROWS], the four groups' -dmin m) into y's columns
 * o..o+nw-1.  (Blocked 4 rows x 4 groups: one mn load and one x broadcast a 4 fma.) */
LP_INLINE void finish(int mr, const float *xs, int64_t nb, const float *const *mn, const float *acc, float *y,
                      int64_t ldy, int64_t nw, int accumulate, const int minima) {
    __m512 a[4][LP_AMX_GROUPS];
    for (int m = 0; m < 4; m++)
        for (int j = 0; j < LP_AMX_GROUPS; j++) a[m][j] = _mm512_load_ps(acc + m * LP_AMX_ROWS + 16 * j);
    for (int64_t b = 0; b < (minima ? nb : 0); b++) {
        __m512 w[LP_AMX_GROUPS];
        for (int j = 0; j < LP_AMX_GROUPS; j++) w[j] = _mm512_load_ps(mn[j] + 16 * b);
        for (int m = 0; m < 4; m++) {
            const __m512 x = _mm512_set1_ps(xs[(m < mr ? m : 0) * nb + b]);
            for (int j = 0; j < LP_AMX_GROUPS; j++) a[m][j] = _mm512_fmadd_ps(x, w[j], a[m][j]);
        }
    }
    for (int m = 0; m < mr; m++)
        for (int j = 0; j < LP_AMX_GROUPS && 16 * j < nw; j++) {
            const __mmask16 cols = (__mmask16)(nw - 16 * j >= 16 ? 0xFFFF : (1u << (nw - 16 * j)) - 1);
            float *yr = y + m * ldy + 16 * j;
            _mm512_mask_storeu_ps(yr, cols, accumulate ? _mm512_add_ps(a[m][j], _mm512_maskz_loadu_ps(cols, yr)) : a[m][j]);
        }
}

/* Output rows o0..o1 (LP_AMX_GROUPS groups of 16 at most): every group packed once, then per
 * slab of SLAB activation rows, per super-block, per 32 rows, each group's four tiles over the
 * super-block (two activation row-tiles x the group's u, v: 16 tdpbssd, 16 tile loads), the next
 * item's issued before this one's float step into acc; after the slab's super-blocks the minima
 * and y.  A super-block's packed groups (32 KB) stay in L1 across the slab's rows, and a row
 * pair's activation tiles (8 KB) across the groups.  (acc, not y: y's rows lie ldy apart, the
 * same L1 sets, 32 rows of them a step.) */
LP_INLINE void chunk(const int sh, int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xprep *xp,
                     float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t ns = n_in / 256, nb = n_in / 32, n = xp->n, gb = group_bytes(n_in) / 4;
    const int ngroups = (int)((o1 - o0 + 15) / 16);
    int32_t *g0 = (int32_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *acc = (float *)(g0 + LP_AMX_GROUPS * gb); /* [SLAB][LP_AMX_ROWS] */
#define GROUP(j) (g0 + (j) * gb) /* u, v, d, mn */
#define GU(j) GROUP(j)
#define GV(j) (GROUP(j) + 4 * n_in)
#define GD(j) ((float *)(GROUP(j) + 8 * n_in))
#define GM(j) (GD(j) + 16 * ns)
    for (int j = 0; j < ngroups; j++) {
        const int64_t a = o0 + 16 * j;
        pack_group(type, w, a, a + 16 < o1 ? a + 16 : o1, n_in, GU(j), GV(j), GD(j), GM(j));
    }
    const int minima = sh != 6; /* (Q6_K: none) */
    if (minima) /* (finish reads all four) */
        for (int j = ngroups; j < LP_AMX_GROUPS; j++) memset(GM(j), 0, (size_t)(16 * nb) * 4);
    const float *mn[LP_AMX_GROUPS];
    for (int j = 0; j < LP_AMX_GROUPS; j++) mn[j] = GM(j);
    configure();
    int32_t t[LAGK][1024] __attribute__((aligned(64))); /* [item % LAGK][0u, 0v, 1u, 1v] */
    item pend[LAGK];
    for (int64_t s0 = 0; s0 < n; s0 += SLAB) {
        const int64_t sn = n - s0 < SLAB ? n - s0 : SLAB;
        const float *s = xp->xr.s + s0 * ns;
        memset(acc, 0, (size_t)(SLAB * LP_AMX_ROWS) * 4);
        int64_t count = 0;
        for (int64_t B = 0; B < ns; B++)
            for (int j = 0; j < ngroups; j++)
                for (int64_t m0 = 0; m0 < sn; m0 += 32, count++) {
                    const int8_t *a0 = xp->xhi + (s0 + m0) * n_in + 4096 * B, *a1 = a0 + 16 * n_in;
                    const int two = sn - m0 > 16; /* (else the second row-tile is past the rows: not computed) */
                    const int32_t *bu = GU(j) + 1024 * B, *bv = GV(j) + 1024 * B;
                    _tile_zero(T_0U);
                    _tile_zero(T_0V);
                    if (two) {
                        _tile_zero(T_1U);
                        _tile_zero(T_1V);
                    }
                    for (int c = 0; c < 4; c++) {
                        _tile_loadd(T_A0, a0 + 1024 * c, 64);
                        _tile_loadd(T_BU, bu + 256 * c, 64);
                        _tile_loadd(T_BV, bv + 256 * c, 64);
                        _tile_dpbssd(T_0U, T_A0, T_BU);
                        _tile_dpbssd(T_0V, T_A0, T_BV);
                        if (two) {
                            _tile_loadd(T_A1, a1 + 1024 * c, 64);
                            _tile_dpbssd(T_1U, T_A1, T_BU);
                            _tile_dpbssd(T_1V, T_A1, T_BV);
                        }
                    }
                    int32_t *tc = t[count % LAGK];
                    _tile_stored(T_0U, tc, 64);
                    _tile_stored(T_0V, tc + 256, 64);
                    if (two) {
                        _tile_stored(T_1U, tc + 512, 64);
                        _tile_stored(T_1V, tc + 768, 64);
                    }
                    pend[count % LAGK] = (item){m0, B, (int)(sn - m0 < 32 ? sn - m0 : 32), j, GD(j) + 16 * B};
                    if (count >= LAGK - 1) /* the item LAGK - 1 back: its tiles stored long enough ago */
                        step(sh, t[(count - (LAGK - 1)) % LAGK], &pend[(count - (LAGK - 1)) % LAGK], s, ns, acc);
                }
        for (int64_t i = count - (LAGK - 1) > 0 ? count - (LAGK - 1) : 0; i < count; i++) step(sh, t[i % LAGK], &pend[i % LAGK], s, ns, acc);
        for (int64_t m = 0; m < sn; m += 4)
            finish((int)(sn - m < 4 ? sn - m : 4), xp->xr.sum32 + (s0 + m) * nb, nb, mn, acc + m * LP_AMX_ROWS,
                   y + (s0 + m) * ldy + o0, ldy, o1 - o0, accumulate, minima);
    }
#undef GROUP
#undef GU
#undef GV
#undef GD
#undef GM
    _tile_release();
}

void lp_amxk_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xprep *xp, float *y,
                   int64_t ldy, int accumulate, void *scratch) {
    if (type == LP_Q4_K)
        chunk(4, type, w, o0, o1, n_in, xp, y, ldy, accumulate, scratch);
    else if (type == LP_Q5_K)
        chunk(5, type, w, o0, o1, n_in, xp, y, ldy, accumulate, scratch);
    else
        chunk(6, type, w, o0, o1, n_in, xp, y, ldy, accumulate, scratch);
}
#endif
