/* Prompt-sized products of Q4_K and Q5_K on AMX tiles with a float step per super-block of 256
 * values instead of one per block of 32 (amx_x86.c's, whose tile stores and float steps, 8 a
 * super-block, bound it far below the tile unit's rate).
 *
 * A Q4_K / Q5_K weight is d sc_b q - dmin m_b: q unsigned (4 or 5 bits), sc_b and m_b the
 * block's 6-bit integers, d and dmin the super-block's.  The activations are ggml's Q8_K, which
 * llama.cpp multiplies Q4_K / Q5_K by: one scale per super-block, s = max |x| / 127, xq = x / s
 * rounded, int8 (one tile), so a super-block's integer dot sum_b sc_b (q_b . xq_b) is one tile
 * sum if the weights carry sc_b: w' = sc_b q (at most 63 x 31 = 1953) split into int8 halves,
 * w' = 2^sh u + v (sh = the q's bits: u <= 61, v < 2^sh).  Two int32 tiles a super-block (x.u,
 * x.v over K = 256, each at most 256 x 127 x 61: exact), combined 2^sh xu + xv in int32 (at most
 * 256 x 127 x 1953 < 2^26: exact), times d s in float; the minima from the float sums of x per
 * block: + sum_b (-dmin m_b) sum(x_b) (llama.cpp's: from xq's sums).  The 8 tile registers hold
 * 2 x 2: two activation row-tiles x the group's u, v (4 int32, 2 A, 2 B tiles), so per 16 x 16
 * outputs and super-block 8 tdpbssd of K = 64, 8 tile loads, 2 tile stores.
 *
 * Precision: xq rounds x to 1/254 of its super-block's largest value, as llama.cpp's (the lanes':
 * int16, 1/65278 of their block's).  Not the lanes' sums bit for bit, so deterministic mode
 * (rows_det_x86.c) keeps amx_x86.c. */
#include "amxk_x86.h"

#include "amx_x86.h"
#include "quants.h"
#include "unpack_x86.h"

static int amxk_on = 1;
__attribute__((constructor)) static void amxk_init(void) {
    const char *env = getenv("LLAMAPY_AMXK");
    amxk_on = !(env && env[0] == '0');
}
int lp_amxk_set(int on) { return amxk_on = on; }

int lp_amxk_covers(int type, int64_t n_in) {
    return amxk_on && lp_amx_on() && n_in % 256 == 0 && (type == LP_Q4_K || type == LP_Q5_K);
}

#if defined(LP_AMX)
void lp_amxk_prep_row(const lp_xprep *xp, int64_t r) {
    const int64_t n_in = xp->n_in, nb = n_in / 32;
    const float *x = xp->x + r * n_in;
    for (int64_t k0 = 0; k0 < n_in; k0 += 256) {
        __m512 amax = _mm512_setzero_ps();
        for (int64_t k = k0; k < k0 + 256; k += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
        const float m = _mm512_reduce_max_ps(amax), s = m / LP_AMXK_QMAX;
        const __m512 inv = _mm512_set1_ps(m > 0.0f ? LP_AMXK_QMAX / m : 0.0f);
        xp->xr.s[r * nb + k0 / 256] = s;
        for (int64_t k = k0; k < k0 + 256; k += 32) {
            const __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + 16);
            xp->xr.sum32[r * nb + k / 32] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
            /* xq = x / s rounded to nearest even, |xq| <= 127 (the saturation never bites) */
            const __m128i qa = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(a, inv)));
            const __m128i qb = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(b, inv)));
            _mm256_storeu_si256((__m256i *)(xp->xhi + LP_AMXK_AT(n_in, r, k)), _mm256_set_m128i(qb, qa));
        }
    }
}

/* A group of 16 weight rows: u and v int32 [n_in / 4][16] (per 4 consecutive k, the 16 rows'
 * 4 int8 side by side: AMX's B tiles), d [n_in / 256][16] the super-blocks' d, mn [n_in / 32][16]
 * the blocks' -dmin m. */
static size_t group_bytes(int64_t n_in) { return 32 * (size_t)n_in + 16 * 4 * (size_t)(n_in / 256 + n_in / 32); }

size_t lp_amxk_scratch_bytes(int64_t n_in) {
    return LP_AMX_GROUPS * group_bytes(n_in) + 16 * (size_t)n_in + (size_t)(n_in / 2) + 2 * (size_t)(n_in / 16) * 4 + 5 * 64;
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

/* Weight rows o0..o1 (at most 16; the rest zero) as a group (group_bytes): each row decoded to
 * bytes q (lp_unpack_row8, d16 / m16 for its minima) into u8 [16][n_in] with its blocks' scales
 * in sc [16][n_in / 32], then per 64 values the 16 rows' u and v, two 16 x 16 dword transposes
 * (a scatter per row and 64 values was a sixth of the product's time). */
static void pack_group(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, uint8_t *u8, uint8_t *sc,
                       float *d16, float *m16, int32_t *bu, int32_t *bv, float *d, float *mn) {
    const int64_t rb = lp_row_bytes(type, n_in), bsz = type == LP_Q4_K ? 144 : 176, nb = n_in / 32;
    const int sh = type == LP_Q4_K ? 4 : 5;
    const __m512i mask = _mm512_set1_epi16((short)((1 << sh) - 1));
    for (int j = 0; j < 16; j++) {
        uint8_t *uj = u8 + j * n_in, *sj = sc + j * nb;
        if (o0 + j >= o1) {
            memset(uj, 0, (size_t)n_in);
            memset(sj, 0, (size_t)nb);
            for (int64_t B = 0; B < n_in / 256; B++) d[16 * B + j] = 0.0f;
            for (int64_t b = 0; b < nb; b++) mn[16 * b + j] = 0.0f;
            continue;
        }
        const uint8_t *row = w + (o0 + j) * rb;
        lp_unpack_row8(type, row, n_in, 0, uj, d16, m16);
        for (int64_t b = 0; b < nb; b++) {
            int scb, m;
            scale_min_k4((int)(b % 8), row + b / 8 * bsz + 4, &scb, &m);
            sj[b] = (uint8_t)scb;
            mn[16 * b + j] = m16[2 * b]; /* (m16: -dmin m, the same for both 16-groups) */
        }
        for (int64_t B = 0; B < n_in / 256; B++) d[16 * B + j] = lp_f16_to_f32(*(const uint16_t *)(row + B * bsz));
    }
    for (int64_t k = 0; k < n_in; k += 64) {
        __m512i ru[16], rv[16];
        for (int j = 0; j < 16; j++) {
            const uint8_t *uj = u8 + j * n_in + k, *sj = sc + j * nb + k / 32;
            const __m512i w0 = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)uj)),
                                                  _mm512_set1_epi16((short)sj[0]));
            const __m512i w1 = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(uj + 32))),
                                                  _mm512_set1_epi16((short)sj[1]));
#define HALVES(f) _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(f(w0))), _mm512_cvtepi16_epi8(f(w1)), 1)
#define U(x) _mm512_srli_epi16((x), sh)
#define V(x) _mm512_and_si512((x), mask)
            ru[j] = HALVES(U);
            rv[j] = HALVES(V);
#undef HALVES
#undef U
#undef V
        }
        transpose16(ru);
        transpose16(rv);
        for (int c = 0; c < 16; c++) {
            _mm512_store_si512(bu + 4 * k + 16 * c, ru[c]);
            _mm512_store_si512(bv + 4 * k + 16 * c, rv[c]);
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

/* One item: super-block B of up to 32 activation rows (r0..) by a group of 16 weight rows (o..). */
typedef struct {
    int64_t r0, o, B;
    int mr, nw;
    const float *d, *mn; /* the group's d of B, -dmin m of B's first block */
} item;

/* An item's float step into y (the accumulator: the first super-block starts it, or adds to y
 * where accumulate): t its four stored tiles [0u, 0v, 1u, 1v][16 x 16]. */
LP_INLINE void step(const int sh, const int32_t *t, const item *it, const lp_xprep *xp, float *y, int64_t ldy, int start) {
    const int64_t nb = xp->n_in / 32;
    const __m512 d = _mm512_load_ps(it->d);
    const __mmask16 cols = (__mmask16)((1u << it->nw) - 1);
    for (int m = 0; m < it->mr; m++) {
        const int64_t r = it->r0 + m;
        float *yr = y + r * ldy + it->o;
        const int32_t *tu = t + 512 * (m >> 4) + 16 * (m & 15);
        const __m512i u = _mm512_load_si512(tu), v = _mm512_load_si512(tu + 256);
        const __m512 p = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(u, sh), v)); /* (exact in int32) */
        __m512 a = start ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(cols, yr);
        a = _mm512_fmadd_ps(p, _mm512_mul_ps(d, _mm512_set1_ps(xp->xr.s[r * nb + it->B])), a);
        const float *xs = xp->xr.sum32 + r * nb + 8 * it->B;
#pragma GCC unroll 8
        for (int b = 0; b < 8; b++) a = _mm512_fmadd_ps(_mm512_set1_ps(xs[b]), _mm512_load_ps(it->mn + 16 * b), a);
        _mm512_mask_storeu_ps(yr, cols, a);
    }
}

/* Output rows o0..o1 (LP_AMX_GROUPS groups of 16 at most): every group packed once, then per
 * super-block, per 32 activation rows, each group's four tiles over the super-block (two
 * activation row-tiles x the group's u, v: 16 tdpbssd, 16 tile loads), the next item's issued
 * before this one's float step.  A super-block's packed groups (32 KB) stay in L1 across the
 * activation rows, and a row pair's activation tiles (8 KB) across the groups; y accumulates
 * across the super-blocks. */
LP_INLINE void chunk(const int sh, int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xprep *xp,
                     float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t ns = n_in / 256, n = xp->n, gb = group_bytes(n_in) / 4;
    const int ngroups = (int)((o1 - o0 + 15) / 16);
    int32_t *g0 = (int32_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    uint8_t *u8 = (uint8_t *)(g0 + LP_AMX_GROUPS * gb), *sc = u8 + 16 * n_in; /* [16][n_in], [16][n_in / 32] */
    float *d16 = (float *)(((uintptr_t)(sc + n_in / 2) + 63) & ~(uintptr_t)63), *m16 = d16 + n_in / 16;
#define GROUP(j) (g0 + (j) * gb) /* u, v, d, mn */
#define GU(j) GROUP(j)
#define GV(j) (GROUP(j) + 4 * n_in)
#define GD(j) ((float *)(GROUP(j) + 8 * n_in))
#define GM(j) (GD(j) + 16 * ns)
    for (int j = 0; j < ngroups; j++) {
        const int64_t a = o0 + 16 * j;
        pack_group(type, w, a, a + 16 < o1 ? a + 16 : o1, n_in, u8, sc, d16, m16, GU(j), GV(j), GD(j), GM(j));
    }
    configure();
    int32_t t[LAGK][1024] __attribute__((aligned(64))); /* [item % LAGK][0u, 0v, 1u, 1v] */
    item pend[LAGK];
    int64_t count = 0;
    for (int64_t B = 0; B < ns; B++)
        for (int64_t r0 = 0; r0 < n; r0 += 32) {
            const int8_t *a0 = xp->xhi + r0 * n_in + 4096 * B, *a1 = a0 + 16 * n_in;
            const int two = n - r0 > 16; /* (else the second row-tile is past the rows: not computed) */
            for (int j = 0; j < ngroups; j++, count++) {
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
                const int64_t oj = o0 + 16 * j;
                pend[count % LAGK] = (item){r0, oj, B, (int)(n - r0 < 32 ? n - r0 : 32), (int)(o1 - oj < 16 ? o1 - oj : 16),
                                            GD(j) + 16 * B, GM(j) + 16 * 8 * B};
                if (count >= LAGK - 1) { /* the item LAGK - 1 back: its tiles stored long enough ago */
                    const item *it = &pend[(count - (LAGK - 1)) % LAGK];
                    step(sh, t[(count - (LAGK - 1)) % LAGK], it, xp, y, ldy, it->B == 0 && !accumulate);
                }
            }
        }
    for (int64_t i = count - (LAGK - 1) > 0 ? count - (LAGK - 1) : 0; i < count; i++) {
        const item *it = &pend[i % LAGK];
        step(sh, t[i % LAGK], it, xp, y, ldy, it->B == 0 && !accumulate);
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
    else
        chunk(5, type, w, o0, o1, n_in, xp, y, ldy, accumulate, scratch);
}
#endif
