/* Deterministic mode's Q4_1 products at the AVX-512 level (rows_det_x86.c takes them from here):
 * the activations quantized per row to int8 with one scale per block of 32 (lp_x8_row: ggml's
 * Q8_1, which llama.cpp's own Q4_1 products use), the weights' nibbles as unsigned bytes, and
 * per (row, output) and block of 32, in block order:
 *
 *   i   = the exact int32 sum of q_w[k] q_x[k] over the block   (any instruction order)
 *   acc = fmaf((float)i, d_w * d_x, acc)                       (d_w * d_x rounded once)
 *   acc = fmaf(sum_x, m_w, acc)                                (sum_x = d_x * the sum of q_x)
 *
 * One row (a decode): 8 outputs at once, each block's 32 products one ymm vpdpbusd, the 8
 * outputs' partials summed into one vector (a transpose-add), the float steps as vector
 * operations across the outputs.  Two rows or more: the rows in the 16 lanes of a zmm (lp_x8's
 * lq), a weight quad broadcast to every lane, one vpdpbusd adding 16 rows x 4 products (the int16
 * lanes' vpdpwssd add 16 x 2), the float steps per lane.  A lane is one row's sequence alone, so
 * any row count gives the same bits (tests/test_deterministic_kernels.py).  The int8 rounding of
 * x costs accuracy against the int16 lanes (llama.cpp's own), bounded in the same test. */
#include "det8_x86.h"

#define NL8 16   /* rows per lane group */
#define TW8 4    /* weight rows per tile */
#define YB8_LD 20 /* a buffered output row's floats (a chunk of 16 and a tile's 4 columns past it) */
#define YB8_ROWS 512

#if defined(LP_AVX512)
static void *al64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

int lp_det8_covers(int type) { return type == LP_Q4_1; }

size_t lp_x8_bytes(int64_t n_in, int64_t n) {
    const int64_t nb = n_in / 32, ng = n > 1 ? (n + NL8 - 1) / NL8 : 0;
    return (size_t)(n * n_in + n * nb * 8 + ng * NL8 * n_in + ng * NL8 * nb * 8) + 5 * 64;
}

lp_x8 lp_x8_at(void *buf, int64_t n_in, int64_t n) {
    lp_x8 p;
    const int64_t nb = n_in / 32;
    p.n_in = n_in, p.n = n, p.n_grp = n > 1 ? (n + NL8 - 1) / NL8 : 0;
    p.lq = (int32_t *)al64(buf);
    p.ld = (float *)al64(p.lq + p.n_grp * NL8 * (n_in / 4));
    p.lsum = p.ld + p.n_grp * NL8 * nb;
    p.d = (float *)al64(p.lsum + p.n_grp * NL8 * nb);
    p.sum = p.d + n * nb;
    p.q = (int8_t *)al64(p.sum + n * nb);
    return p;
}

/* As lp_prepare_x_row with 127 for LP_XQ_MAX: per block, d = max |x| / 127, q = x 127 / max |x|
 * rounded to nearest even (vcvtps2dq under the default rounding mode, as rintf). */
void lp_x8_row(const float *x, const lp_x8 *p, int64_t r) {
    const int64_t n_in = p->n_in, nb = n_in / 32;
    const __m512 abs = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
        const __m512 m = _mm512_max_ps(_mm512_max_ps(_mm512_and_ps(x0, abs), _mm512_setzero_ps()), _mm512_and_ps(x1, abs));
        const float mx = _mm512_reduce_max_ps(m);
        const float inv = mx > 0.0f ? 127.0f / mx : 0.0f;
        const __m512 iv = _mm512_set1_ps(inv);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, iv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, iv));
        q0 = _mm512_max_epi32(_mm512_min_epi32(q0, lim), nlim);
        q1 = _mm512_max_epi32(_mm512_min_epi32(q1, lim), nlim);
        int8_t *qb = p->q + r * n_in + 32 * b;
        _mm_storeu_si128((__m128i *)qb, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qb + 16), _mm512_cvtepi32_epi8(q1));
        const float d = mx / 127.0f;
        p->d[r * nb + b] = d;
        p->sum[r * nb + b] = d * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
}

void lp_x8_lanes_block(const lp_x8 *p, int64_t b) {
    const int64_t n_in = p->n_in, nb = n_in / 32, nq = n_in / 4;
    for (int64_t li = 0; li < p->n_grp * NL8; li++) {
        const int64_t g = li / NL8, lane = li % NL8;
        int32_t *lq = p->lq + (g * nq + 8 * b) * NL8 + lane;
        float *ld = p->ld + (g * nb + b) * NL8 + lane, *ls = p->lsum + (g * nb + b) * NL8 + lane;
        if (li < p->n) {
            const int8_t *q = p->q + li * n_in + 32 * b;
            for (int k = 0; k < 8; k++) memcpy(lq + NL8 * k, q + 4 * k, 4);
            *ld = p->d[li * nb + b], *ls = p->sum[li * nb + b];
        } else { /* zeros: no garbage (subnormal) scales in the float steps */
            for (int k = 0; k < 8; k++) lq[NL8 * k] = 0;
            *ld = *ls = 0.0f;
        }
    }
}

lp_x8 lp_x8_slice(const lp_x8 *p, int64_t r0, int64_t n) {
    lp_x8 s = *p;
    const int64_t g = r0 / NL8, nb = p->n_in / 32;
    s.n = n, s.n_grp = (n + NL8 - 1) / NL8;
    s.q += r0 * p->n_in, s.d += r0 * nb, s.sum += r0 * nb;
    s.lq += g * NL8 * (p->n_in / 4), s.ld += g * NL8 * nb, s.lsum += g * NL8 * nb;
    return s;
}

/* a weight row's room in scratch: its nibbles as bytes in element order, d and m per block */
static size_t w8_bytes(int64_t n_in) { return (size_t)n_in + (size_t)(n_in / 32) * 8 + 128; }
size_t lp_det8_scratch_bytes(int64_t n_in) { return 8 * w8_bytes(n_in) + (size_t)YB8_ROWS * YB8_LD * 4 + 128; }

/* Q4_1 row (blocks: d, m as f16, then 16 bytes: element j low nibble, j + 16 high) into u8 [n_in] and d, m */
static void unpack_q4_1(const uint8_t *row, int64_t n_in, uint8_t *u, float *d, float *m) {
    const __m128i lo = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < n_in / 32; b++) {
        const uint8_t *blk = row + 20 * b;
        d[b] = lp_f16_to_f32(lp_rd16(blk)), m[b] = lp_f16_to_f32(lp_rd16(blk + 2));
        const __m128i qs = _mm_loadu_si128((const __m128i *)(blk + 4));
        _mm_storeu_si128((__m128i *)(u + 32 * b), _mm_and_si128(qs, lo));
        _mm_storeu_si128((__m128i *)(u + 32 * b + 16), _mm_and_si128(_mm_srli_epi16(qs, 4), lo));
    }
}

LP_INLINE __m512i dpbusd512(__m512i acc, __m512i u, __m512i s) {
#if defined(LP_VNNI)
    return _mm512_dpbusd_epi32(acc, u, s);
#else /* exact: |u s + u s| <= 2 15 127 fits int16 */
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}
LP_INLINE __m256i dpbusd256(__m256i acc, __m256i u, __m256i s) {
#if defined(LP_VNNI)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* Four vectors of lanes as rows: row r's four at y[r ldy] (as lanes_x86.c store_rows4). */
LP_INLINE void rows4(__m512 a0, __m512 a1, __m512 a2, __m512 a3, float *y, int64_t ldy) {
    const __m512 t0 = _mm512_unpacklo_ps(a0, a1), t1 = _mm512_unpackhi_ps(a0, a1);
    const __m512 t2 = _mm512_unpacklo_ps(a2, a3), t3 = _mm512_unpackhi_ps(a2, a3);
    const __m512 r[4] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE), _mm512_shuffle_ps(t1, t3, 0x44),
                         _mm512_shuffle_ps(t1, t3, 0xEE)};
    for (int m = 0; m < 4; m++) {
        _mm_storeu_ps(y + m * ldy, _mm512_castps512_ps128(r[m]));
        _mm_storeu_ps(y + (4 + m) * ldy, _mm512_extractf32x4_ps(r[m], 1));
        _mm_storeu_ps(y + (8 + m) * ldy, _mm512_extractf32x4_ps(r[m], 2));
        _mm_storeu_ps(y + (12 + m) * ldy, _mm512_extractf32x4_ps(r[m], 3));
    }
}

/* NW weight rows (u[j], d[j], m[j]) against NG (1, 2) lane groups from g0: row 16 i + lane's
 * outputs at y[(16 i + lane) ldy + j], j < 4 (columns past NW: zeros). */
LP_INLINE void tile8(const int NG, const int NW, const uint8_t *const *u, const float *const *wd, const float *const *wm,
                     const lp_x8 *p, int64_t g0, float *y, int64_t ldy) {
    const int64_t n_in = p->n_in, nb = n_in / 32, nq = n_in / 4;
    const __m512i *xq[2];
    const float *dx[2], *sx[2];
    for (int i = 0; i < NG; i++) {
        xq[i] = (const __m512i *)(p->lq + (g0 + i) * NL8 * nq);
        dx[i] = p->ld + (g0 + i) * NL8 * nb;
        sx[i] = p->lsum + (g0 + i) * NL8 * nb;
    }
    __m512 acc[2][TW8];
    for (int i = 0; i < NG; i++)
        for (int j = 0; j < NW; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i s[2][TW8], s2[TW8];
        for (int i = 0; i < NG; i++)
            for (int j = 0; j < NW; j++) s[i][j] = _mm512_setzero_si512();
        for (int j = 0; j < NW; j++) s2[j] = _mm512_setzero_si512();
        for (int k = 0; k < 8; k++) {
            __m512i xv[2];
            for (int i = 0; i < NG; i++) xv[i] = _mm512_load_si512(xq[i] + 8 * b + k);
            for (int j = 0; j < NW; j++) {
                int32_t wq;
                memcpy(&wq, u[j] + 32 * b + 4 * k, 4);
                const __m512i wv = _mm512_set1_epi32(wq);
                if (NG == 1 && (k & 1)) /* one group: even and odd quads in two chains (the same integers) */
                    s2[j] = dpbusd512(s2[j], wv, xv[0]);
                else
                    for (int i = 0; i < NG; i++) s[i][j] = dpbusd512(s[i][j], wv, xv[i]);
            }
        }
        if (NG == 1)
            for (int j = 0; j < NW; j++) s[0][j] = _mm512_add_epi32(s[0][j], s2[j]);
        for (int i = 0; i < NG; i++) {
            const __m512 dv = _mm512_loadu_ps(dx[i] + NL8 * b), sv = _mm512_loadu_ps(sx[i] + NL8 * b);
            for (int j = 0; j < NW; j++) {
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i][j]), _mm512_mul_ps(_mm512_set1_ps(wd[j][b]), dv), acc[i][j]);
                acc[i][j] = _mm512_fmadd_ps(sv, _mm512_set1_ps(wm[j][b]), acc[i][j]);
            }
        }
    }
    const __m512 z = _mm512_setzero_ps();
    for (int i = 0; i < NG; i++)
        rows4(acc[i][0], NW > 1 ? acc[i][1] : z, NW > 2 ? acc[i][2] : z, NW > 3 ? acc[i][3] : z, y + NL8 * i * ldy, ldy);
}

static void tile8_k(int ng, int nw, const uint8_t *const *u, const float *const *wd, const float *const *wm, const lp_x8 *p,
                    int64_t g0, float *y, int64_t ldy) {
    switch (ng * 8 + nw) {
    case 17: tile8(2, 1, u, wd, wm, p, g0, y, ldy); break;
    case 18: tile8(2, 2, u, wd, wm, p, g0, y, ldy); break;
    case 19: tile8(2, 3, u, wd, wm, p, g0, y, ldy); break;
    case 20: tile8(2, 4, u, wd, wm, p, g0, y, ldy); break;
    case 9: tile8(1, 1, u, wd, wm, p, g0, y, ldy); break;
    case 10: tile8(1, 2, u, wd, wm, p, g0, y, ldy); break;
    case 11: tile8(1, 3, u, wd, wm, p, g0, y, ldy); break;
    default: tile8(1, 4, u, wd, wm, p, g0, y, ldy); break;
    }
}

/* lane j: the sum of v[j]'s 8 int32 (exact) */
LP_INLINE __m256i sum8x8(const __m256i v[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    /* a: 128-bit half h holds v[0..3]'s sums over their half h; c: v[4..7]'s */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}

/* One row: outputs o0 .. o1 of n_out, 8 at a time (a last short group repeats its last row, not
 * stored); the next 8 rows' lines requested while these compute, spread over the blocks. */
static void row8(const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y, int accumulate) {
    const int64_t n_in = p->n_in, nb = n_in / 32, rb = 20 * nb;
    const __m128i lo = _mm_set1_epi8(0x0f);
    for (int64_t o = o0; o < o1; o += 8) {
        const int nw = (int)(o1 - o < 8 ? o1 - o : 8);
        const uint8_t *rows[8];
        for (int j = 0; j < 8; j++) rows[j] = w + (o + (j < nw ? j : nw - 1)) * rb;
        const int64_t pe = o + 16 < n_out ? o + 16 : n_out;
        const char *pf = (const char *)(((uintptr_t)(w + (o + 8) * rb)) & ~(uintptr_t)63);
        const int64_t pf_lines = pe > o + 8 ? ((const char *)(w + pe * rb) - pf + 63) / 64 : 0, per = (pf_lines + nb - 1) / nb;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            for (int64_t i = b * per; i < (b + 1) * per && i < pf_lines; i++) LP_PREFETCH_W(pf + 64 * i);
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(p->q + 32 * b));
            __m256i ps[8];
            for (int j = 0; j < 8; j++) {
                const __m128i qs = _mm_loadu_si128((const __m128i *)(rows[j] + 20 * b + 4));
                const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), lo), _mm_and_si128(qs, lo));
                ps[j] = dpbusd256(_mm256_setzero_si256(), u, xv);
            }
            const __m256i dm = _mm256_setr_epi32((int)lp_rd32(rows[0] + 20 * b), (int)lp_rd32(rows[1] + 20 * b),
                                                 (int)lp_rd32(rows[2] + 20 * b), (int)lp_rd32(rows[3] + 20 * b),
                                                 (int)lp_rd32(rows[4] + 20 * b), (int)lp_rd32(rows[5] + 20 * b),
                                                 (int)lp_rd32(rows[6] + 20 * b), (int)lp_rd32(rows[7] + 20 * b));
            const __m256 dw = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dm)); /* each row's (d, m) f16 pair: d low */
            const __m256 mw = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(dm, 16)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8x8(ps)), _mm256_mul_ps(dw, _mm256_set1_ps(p->d[b])), acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(p->sum[b]), mw, acc);
        }
        float t[8];
        _mm256_storeu_ps(t, acc);
        for (int j = 0; j < nw; j++) y[o + j] = accumulate ? y[o + j] + t[j] : t[j];
    }
}

void lp_det8_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                   int64_t ldy, int accumulate, void *scratch) {
    (void)type;
    if (p->n == 1) {
        row8(w, o0, o1, n_out, p, y, accumulate);
        return;
    }
    const int64_t n_in = p->n_in, nb = n_in / 32, rb = 20 * nb, n = p->n, n_pad = p->n_grp * NL8;
    uint8_t *u[TW8];
    float *wd[TW8], *wm[TW8];
    for (int j = 0; j < TW8; j++) {
        u[j] = (uint8_t *)al64((char *)scratch + j * w8_bytes(n_in));
        wd[j] = (float *)(u[j] + n_in), wm[j] = wd[j] + nb;
    }
    float *yb = (float *)al64((char *)scratch + 8 * w8_bytes(n_in)); /* [n_pad][YB8_LD]: each y row written once */
    const int buffered = n_pad <= YB8_ROWS;
    float t[2 * NL8 * 4];
    for (int64_t o = o0; o < o1; o += TW8) {
        const int nw = (int)(o1 - o < TW8 ? o1 - o : TW8);
        for (int j = 0; j < nw; j++) unpack_q4_1(w + (o + j) * rb, n_in, u[j], wd[j], wm[j]);
        for (int64_t g = 0; g < p->n_grp; g += 2) {
            const int ng = g + 1 < p->n_grp ? 2 : 1;
            if (buffered) {
                tile8_k(ng, nw, (const uint8_t *const *)u, (const float *const *)wd, (const float *const *)wm, p, g,
                        yb + NL8 * g * YB8_LD + (o - o0), YB8_LD);
                continue;
            }
            tile8_k(ng, nw, (const uint8_t *const *)u, (const float *const *)wd, (const float *const *)wm, p, g, t, 4);
            for (int64_t i = 0; i < NL8 * ng && NL8 * g + i < n; i++)
                for (int j = 0; j < nw; j++) {
                    float *yo = y + (NL8 * g + i) * ldy + o + j;
                    *yo = accumulate ? *yo + t[4 * i + j] : t[4 * i + j];
                }
        }
    }
    if (buffered) { /* a chunk's row (at most 16 floats) in one masked store, no call to memcpy */
        const __mmask16 mk = (__mmask16)((1u << (o1 - o0 < 16 ? o1 - o0 : 16)) - 1);
        for (int64_t r = 0; r < n; r++) {
            float *yr = y + r * ldy + o0;
            const __m512 v = _mm512_maskz_loadu_ps(mk, yb + r * YB8_LD);
            _mm512_mask_storeu_ps(yr, mk, accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(mk, yr), v) : v);
        }
    }
}
#else
int lp_det8_covers(int type) { return (void)type, 0; }
size_t lp_x8_bytes(int64_t n_in, int64_t n) { return (size_t)(n_in * n) * 0; }
lp_x8 lp_x8_at(void *buf, int64_t n_in, int64_t n) {
    lp_x8 p;
    memset(&p, 0, sizeof p);
    (void)buf, (void)n_in, (void)n;
    return p;
}
void lp_x8_row(const float *x, const lp_x8 *p, int64_t r) { (void)x, (void)p, (void)r; }
void lp_x8_lanes_block(const lp_x8 *p, int64_t b) { (void)p, (void)b; }
lp_x8 lp_x8_slice(const lp_x8 *p, int64_t r0, int64_t n) { return (void)r0, (void)n, *p; }
size_t lp_det8_scratch_bytes(int64_t n_in) { return (size_t)n_in * 0; }
void lp_det8_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                   int64_t ldy, int accumulate, void *scratch) {
    (void)type, (void)w, (void)o0, (void)o1, (void)n_out, (void)p, (void)y, (void)ldy, (void)accumulate, (void)scratch;
}
#endif
