/* Deterministic mode's multi-row products (x86): y (+)= x W^T for any number of activation
 * rows, where every output element y[r, o] is bit for bit what the ONE-row product (lp_mm with
 * that row alone: mm.c's n == 1 path, row1_x86.c rows_32 and row1k_x86.c's split K-quants)
 * gives.  Each weight block is decoded once for a group of rows; each row keeps its own
 * accumulators and takes the one-row kernel's steps in the one-row kernel's order:
 *   - the activations: lp_prepare_x_row per row, kept split (qh / ql, isum16) as at one row;
 *   - Q4_0 / Q4_1 / Q5_0 / Q5_1: weight rows in the pairs mm_chunk forms at one row (from each
 *     chunk's first row, an odd last row alone), the pair's two horizontal sums taken together
 *     (hsum2), a lone row's alone (hsum) -- the two orders differ, so the pairing is kept;
 *   - Q8_0: one weight row at a time (no pair path at one row);
 *   - Q4_K / Q5_K: row1k_x86.c k45_rows (a pair there is two independent single rows);
 *   - Q6_K: row1k_x86.c lp_row1_q6_k_split.
 * The output rows split among the threads in chunks of LP_DET_CHUNK (mm.c's CHUNK): a chunk's
 * element order does not depend on which thread takes it.  The helpers below copy row1k_x86.c's
 * (static there); tests/test_deterministic_kernels.py compares this file with the one-row
 * kernels bit for bit, so any change to either order fails there.
 * Other types (and non-x86 builds) return LP_DET_UNCOVERED: the caller keeps one-row ubatches. */
#include <omp.h>

#include "rows_det_x86.h"

#include "blocks_x86.h"

#define LP_DET_CHUNK 16     /* = mm.c's CHUNK: the one-row path's pairs start at each chunk's first row */
#define LP_DET_G 4          /* activation rows per pass over a weight row's blocks */
#define LP_DET_UNCOVERED -2

/* Does this file cover the type at this row length? */
int lp_mm_det_covers(int type, int64_t n_in) {
#if defined(LP_AVX2) || defined(LP_AVX512)
    switch (type) {
    case LP_Q4_0: case LP_Q4_1: case LP_Q5_0: case LP_Q5_1: case LP_Q8_0: return n_in > 0 && n_in % 32 == 0;
    case LP_Q4_K: case LP_Q5_K: case LP_Q6_K: return n_in > 0 && n_in % 256 == 0;
    default: return 0;
    }
#else
    (void)type, (void)n_in;
    return 0;
#endif
}

#if defined(LP_AVX2) || defined(LP_AVX512)

#include "rows_det_32.inc"

/* ---- row1k_x86.c's steps (k45_rows, lp_row1_q6_k_split) ---- */
LP_INLINE __m256i d_dot32v(__m256i w, __m256i h, __m256i l) {
#if defined(LP_VNNI)
    return _mm256_dpbusd_epi32(_mm256_slli_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), w, h), 8), w, l);
#elif defined(LP_AVXVNNI)
    return _mm256_dpbusd_avx_epi32(_mm256_slli_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w, h), 8), w, l);
#else
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(w, h), _mm256_set1_epi16(256)),
                            _mm256_madd_epi16(_mm256_maddubs_epi16(w, l), _mm256_set1_epi16(1)));
#endif
}

LP_INLINE __m256i d_pair_sums(__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
LP_INLINE __m256i d_quad_sums(__m256i p, __m256i q) {
    return _mm256_add_epi32(_mm256_unpacklo_epi64(p, q), _mm256_unpackhi_epi64(p, q));
}
LP_INLINE void d_sum_quads(const __m256i v[8], __m256i u[2]) {
    u[0] = d_quad_sums(d_pair_sums(v[0], v[1]), d_pair_sums(v[2], v[3]));
    u[1] = d_quad_sums(d_pair_sums(v[4], v[5]), d_pair_sums(v[6], v[7]));
}
LP_INLINE __m256i d_sum8x8(const __m256i v[8]) {
    __m256i u[2];
    d_sum_quads(v, u);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u[0], u[1], 0x20), _mm256_permute2x128_si256(u[0], u[1], 0x31));
}

LP_INLINE __m128i d_k45_sc(const uint8_t *sc) {
    const __m128i b = _mm_loadu_si128((const __m128i *)sc);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi8(b, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)),
                                                    _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi8(b, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)), 2),
                                     _mm_set1_epi8(0x30));
    return _mm_or_si128(lo, hi);
}

LP_INLINE __m256 d_u8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

/* One weight row of Q4_K / Q5_K against rows r0..r0+nx-1: per row k45_rows (nr 1). */
LP_INLINE void det_k45(const int type, const uint8_t *row, int64_t nsb, const lp_xrows *xr, int64_t r0, int nx, float *y) {
    const int bb = type == LP_Q4_K ? 144 : 176;
    __m256 a[LP_DET_G], am[LP_DET_G];
    for (int i = 0; i < LP_DET_G; i++) a[i] = am[i] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *b = row + sb * bb, *qs = b + (type == LP_Q4_K ? 16 : 48);
        const __m128i sm = d_k45_sc(b + 4);
        const __m128 dd = f16x2_ps(b);
        const __m256 scd = _mm256_mul_ps(d_u8x8(sm), _mm256_broadcastss_ps(dd)); /* row-independent: sc d */
        const __m256 mdm = _mm256_mul_ps(d_u8x8(_mm_unpackhi_epi64(sm, sm)), _mm256_broadcastss_ps(_mm_movehdup_ps(dd)));
        __m256i hb = type == LP_Q5_K ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
        __m256i wv[8];
        for (int j = 0; j < 4; j++) {
#if defined(LP_VNNI) || defined(LP_AVXVNNI)
            if (type == LP_Q4_K) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
                wv[2 * j] = _mm256_and_si256(q, _mm256_set1_epi8(15));
                wv[2 * j + 1] = _mm256_and_si256(q, _mm256_set1_epi8((char)0xF0));
                continue;
            }
#endif
            k45_pair(type, qs + 32 * j, &hb, &wv[2 * j], &wv[2 * j + 1]);
        }
        const int64_t k = 256 * sb;
#pragma GCC unroll 4
        for (int i = 0; i < LP_DET_G; i++) {
            if (i >= nx) break;
            const int64_t r = r0 + i;
            const int8_t *xh = xr->qh + r * xr->n_in + k, *xl = xr->ql + r * xr->n_in + k;
            const float *s = xr->s + r * nsb * 8, *sum32 = xr->sum32 + r * nsb * 8;
            __m256 sv = _mm256_mul_ps(scd, _mm256_loadu_ps(s + 8 * sb));
#if defined(LP_VNNI) || defined(LP_AVXVNNI)
            if (type == LP_Q4_K) sv = _mm256_mul_ps(sv, _mm256_setr_ps(1, 0.0625f, 1, 0.0625f, 1, 0.0625f, 1, 0.0625f));
#endif
            am[i] = _mm256_fmadd_ps(mdm, _mm256_loadu_ps(sum32 + 8 * sb), am[i]);
            __m256i v[8];
            for (int j = 0; j < 4; j++) {
                v[2 * j] = d_dot32v(wv[2 * j], _mm256_loadu_si256((const __m256i *)(xh + 64 * j)),
                                    _mm256_loadu_si256((const __m256i *)(xl + 64 * j)));
                v[2 * j + 1] = d_dot32v(wv[2 * j + 1], _mm256_loadu_si256((const __m256i *)(xh + 64 * j + 32)),
                                        _mm256_loadu_si256((const __m256i *)(xl + 64 * j + 32)));
            }
            a[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d_sum8x8(v)), sv, a[i]);
        }
    }
    for (int i = 0; i < nx; i++) y[i] = d_hsum(a[i]) - d_hsum(am[i]);
}

/* One weight row of Q6_K against rows r0..r0+nx-1: per row lp_row1_q6_k_split. */
LP_INLINE void det_q6k(const uint8_t *row, int64_t nsb, const lp_xrows *xr, int64_t r0, int nx, float *y) {
    const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    const __m256i eo = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m256 a0[LP_DET_G], a1[LP_DET_G];
    for (int i = 0; i < LP_DET_G; i++) a0[i] = a1[i] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *b = row + sb * 210;
        const __m256 d = _mm256_set1_ps(lp_f16_to_f32(lp_rd16(b + 208)));
        const __m128i sc = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(b + 192)), even_odd);
        const __m256 c0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc));
        const __m256 c1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc, sc)));
        __m256i w[8];
        q6k_half(b, b + 128, w);
        q6k_half(b + 64, b + 160, w + 4);
        const int64_t k = 256 * sb;
#pragma GCC unroll 4
        for (int i = 0; i < LP_DET_G; i++) {
            if (i >= nx) break;
            const int64_t r = r0 + i;
            const int8_t *xh = xr->qh + r * xr->n_in + k, *xl = xr->ql + r * xr->n_in + k;
            const float *s = xr->s + r * nsb * 8;
            const int32_t *is16 = xr->isum16 + r * nsb * 16;
            const __m256 ds = _mm256_mul_ps(d, _mm256_loadu_ps(s + 8 * sb));
            const __m256 sv0 = _mm256_mul_ps(c0, _mm256_permute2f128_ps(ds, ds, 0x00));
            const __m256 sv1 = _mm256_mul_ps(c1, _mm256_permute2f128_ps(ds, ds, 0x11));
            __m256i v[8];
            for (int n = 0; n < 2; n++)
                for (int j = 0; j < 4; j++)
                    v[4 * n + j] = d_dot32v(w[4 * n + j], _mm256_loadu_si256((const __m256i *)(xh + 128 * n + 32 * j)),
                                            _mm256_loadu_si256((const __m256i *)(xl + 128 * n + 32 * j)));
            __m256i u[2];
            d_sum_quads(v, u);
            const __m256i o0 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(is16 + 16 * sb)), eo);
            const __m256i o1 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(is16 + 16 * sb + 8)), eo);
            a0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(u[0], _mm256_slli_epi32(o0, 5))), sv0, a0[i]);
            a1[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(u[1], _mm256_slli_epi32(o1, 5))), sv1, a1[i]);
        }
    }
    for (int i = 0; i < nx; i++) y[i] = d_hsum(_mm256_add_ps(a0[i], a1[i]));
}

LP_INLINE void put_det(float *y, float v, int accumulate) { *y = accumulate ? *y + v : v; }

/* Output rows o0..o1 (one chunk) against the activation rows r0..r1. */
static void det_tile(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xrows *xr, int64_t r0,
                     int64_t r1, float *y, int64_t ldy, int accumulate) {
    const int64_t rb = lp_row_bytes(type, n_in);
    float acc[2 * LP_DET_G];
    const int pairs = type == LP_Q4_0 || type == LP_Q4_1 || type == LP_Q5_0 || type == LP_Q5_1;
    const int k_type = type == LP_Q4_K || type == LP_Q5_K || type == LP_Q6_K;
    for (int64_t o = o0; o < o1;) {
        const int nr = pairs && o + 2 <= o1 ? 2 : 1;
        const uint8_t *w0 = w + o * rb, *w1 = w0 + (nr == 2 ? rb : 0);
        for (int64_t g = r0; g < r1; g += LP_DET_G) {
            const int nx = (int)(r1 - g < LP_DET_G ? r1 - g : LP_DET_G);
            if (k_type) {
                if (type == LP_Q6_K) det_q6k(w0, n_in / 256, xr, g, nx, acc);
                else if (type == LP_Q4_K) det_k45(LP_Q4_K, w0, n_in / 256, xr, g, nx, acc);
                else det_k45(LP_Q5_K, w0, n_in / 256, xr, g, nx, acc);
                for (int i = 0; i < nx; i++) put_det(y + (g + i) * ldy + o, acc[i], accumulate);
                continue;
            }
            switch (type) {
            case LP_Q4_0: DET32(LP_Q4_0); break;
            case LP_Q4_1: DET32(LP_Q4_1); break;
            case LP_Q5_0: DET32(LP_Q5_0); break;
            case LP_Q5_1: DET32(LP_Q5_1); break;
            default: DET32(LP_Q8_0); break;
            }
            for (int i = 0; i < nx; i++) {
                put_det(y + (g + i) * ldy + o, acc[2 * i], accumulate);
                if (nr == 2) put_det(y + (g + i) * ldy + o + 1, acc[2 * i + 1], accumulate);
            }
        }
        o += nr;
    }
}
#undef DET32

/* Activation rows of n_in (their int16 and int8 forms, 4 n_in bytes) in `bytes`, whole groups. */
static int64_t det_rows_in(int64_t bytes, int64_t n_in) {
    const int64_t t = bytes / (4 * n_in) / LP_DET_G * LP_DET_G;
    return t < LP_DET_G ? LP_DET_G : t;
}

/* Output rows o0..o1 (one chunk) against the activation rows r0..r1, about 16 KiB of them at a
 * time (kept in L1 across the chunk's weight rows).  Only the order in which the (row, output)
 * elements are computed changes; each element's arithmetic is det_tile's. */
static void det_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xrows *xr, int64_t r0,
                      int64_t r1, float *y, int64_t ldy, int accumulate) {
    const int64_t t = det_rows_in(16384, n_in);
    for (int64_t r = r0; r < r1; r += t) det_tile(type, w, o0, o1, n_in, xr, r, r + t < r1 ? r + t : r1, y, ldy, accumulate);
}

/* The activation rows with every form the one-row kernels read (split kept at any row count). */
size_t lp_det_xrows_bytes(int64_t n_in, int64_t n) {
    return (size_t)(n * n_in) * 2 + 2 * (size_t)(n * (n_in / 32)) * 4 + 2 * (size_t)(n * (n_in / 16)) * 4
           + 2 * (size_t)(n * n_in) + 8 * 64;
}

static void *det_align(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

lp_xrows lp_det_xrows_at(void *buf, int64_t n_in, int64_t n) {
    lp_xrows x;
    x.n_in = n_in;
    x.n = n;
    x.q = (int16_t *)det_align(buf);
    x.s = (float *)det_align(x.q + n * n_in);
    x.sum16 = (float *)det_align(x.s + n * (n_in / 32));
    x.sum32 = (float *)det_align(x.sum16 + n * (n_in / 16));
    x.qh = (int8_t *)det_align(x.sum32 + n * (n_in / 32));
    x.ql = x.qh + n * n_in;
    x.isum16 = (int32_t *)det_align(x.ql + n * n_in);
    x.qe = NULL;
    return x;
}

void lp_det_prep_for(const float *x, const lp_xrows *xr) {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < xr->n; r++) lp_prepare_x_row(x + r * xr->n_in, *xr, r);
}

/* The rows in tiles of about 128 KiB (in L2 across every weight row: a 512-row ubatch's
 * activations, 1-3 MiB, streamed from L3 once a chunk otherwise, twice the time), each tile's
 * output chunks split among the threads (no barrier between tiles: they write other rows). */
void lp_mm_det_for(int type, const uint8_t *w, int64_t n_out, const lp_xrows *xr, float *y, int64_t ldy, int accumulate) {
    const int64_t t = det_rows_in(131072, xr->n_in);
    for (int64_t r0 = 0; r0 < xr->n; r0 += t) {
        const int64_t r1 = r0 + t < xr->n ? r0 + t : xr->n;
#pragma omp for schedule(static) nowait
        for (int64_t o0 = 0; o0 < n_out; o0 += LP_DET_CHUNK)
            det_chunk(type, w, o0, o0 + LP_DET_CHUNK < n_out ? o0 + LP_DET_CHUNK : n_out, xr->n_in, xr, r0, r1, y, ldy,
                      accumulate);
    }
#pragma omp barrier
}
#else
size_t lp_det_xrows_bytes(int64_t n_in, int64_t n) { return (size_t)(n_in * n) * 0 + 64; }
lp_xrows lp_det_xrows_at(void *buf, int64_t n_in, int64_t n) {
    lp_xrows x;
    memset(&x, 0, sizeof x);
    (void)buf, (void)n_in, (void)n;
    return x;
}
void lp_det_prep_for(const float *x, const lp_xrows *xr) { (void)x, (void)xr; }
void lp_mm_det_for(int type, const uint8_t *w, int64_t n_out, const lp_xrows *xr, float *y, int64_t ldy, int accumulate) {
    (void)type, (void)w, (void)n_out, (void)xr, (void)y, (void)ldy, (void)accumulate;
}
#endif

/* y[r, o] (+)= sum_k x[r, k] W[o, k] with every element the one-row product's (lp_mm of row r
 * alone) bit for bit.  Returns 0; -1 without scratch memory; LP_DET_UNCOVERED (-2) where the
 * type / row length has no such path (lp_mm_det_covers): nothing written. */
int lp_mm_det(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
              int64_t ldy, int accumulate) {
    if (!lp_mm_det_covers(type, n_in)) return LP_DET_UNCOVERED;
    void *buf = malloc(lp_det_xrows_bytes(n_in, n_rows));
    if (!buf) return -1;
    const lp_xrows xr = lp_det_xrows_at(buf, n_in, n_rows);
#pragma omp parallel
    {
        lp_det_prep_for(x, &xr);
        lp_mm_det_for(type, w, n_out, &xr, y, ldy, accumulate);
    }
    free(buf);
    return 0;
}
