/* Deterministic mode's products of the 32-element types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) for two
 * rows or more at the AVX2 level: det8_x86.h's contract, the same sequence per (row, output) as
 * its one-row kernel (det8_row_x86.c), so any row count and thread split gives the same bits:
 *
 *   i   = the exact int32 sum of u_w[k] q_x[k] over the block of 32, less off x qs
 *   acc = fmaf((float)i, d_w * d_x, acc)          and with a minimum   acc = fmaf(sum_x, m_w, acc)
 *
 * The rows sit in lanes (lp_x8's lq: a 16-row group, read as two ymm halves of 8 rows), a weight
 * quad broadcast to every lane.  Without VNNI the products are ggml's AVX2 pair (vpmaddubsw, then
 * vpmaddwd by ones): vpmaddubsw's int16 pairs are exact while |u s + u s| <= 32767, so G of them
 * add in int16 before vpmaddwd widens them: u <= 15 (Q4_0 + 8, Q4_1) 8 quads (8 x 2 x 15 x 127 =
 * 30480), u <= 31 (Q5_0 + 16, Q5_1) 4 quads (31496), Q8_0 signed (LP_DET8_Q8_SIGNED:
 * vpmaddubsw(|q_w|, sign(q_x, q_w)), 2 x 128 x 127 = 32512) one.  With AVX-VNNI one vpdpbusd a
 * quad (Q8_0 then q + 128).  Every route gives the exact integer, so the bits are the sequence's.
 * The signed forms' |q_w| (vpmaddubsw's unsigned side) are made once a weight row (ua), not once a
 * quad and row group.  A chunk's outputs gather in a buffer of rows (yb: 16 floats, one line a row),
 * each y row's strip written once at the end (put_rows): a tile's 2 columns straight into y touched
 * rows ldy apart (often a multiple of 4 KiB: the same L1 sets), each line read for ownership again
 * per tile. */
#include "det8_avx2_x86.h"

#include "unpack_x86.h"

#if defined(LP_AVX2) && !defined(LP_AVX512)
#define NL8 16 /* rows per lane group (lp_x8) */
#define TW 2   /* weight rows per tile: 2 halves x 2 weights keep int16, int32 and float sums in 16 ymm */
#define YB_LD 16     /* a buffered output row: a chunk's 16 floats, one cache line */
#define YB_ROWS 512  /* rows the buffer holds (rows_det_x86.c's det8 slices: at most 512) */

static void *al32(void *p) { return (void *)(((uintptr_t)p + 31) & ~(uintptr_t)31); }
/* a weight row's room: its bytes, then d and m per 16-group (the K-quants' lp_unpack_row8; per block after) */
static size_t w8_bytes(int64_t n_in) { return (size_t)n_in + (size_t)(n_in / 16) * 8 + 64; }

/* A weight row as det8 reads it: u [n_in] (lp_det8_bytes; Q4_K / Q5_K their q, 0..15 / 0..31),
 * d and m per block of 32 (the K-quants': d sc and -(dmin m) of the block's sub-block, lp_unpack_row8's) */
static void unpack(int type, const uint8_t *row, int64_t n_in, uint8_t *u, float *d, float *m) {
    if (type == LP_Q6_K) { /* q - 32, d sc per 16-group (d [n_in / 16]), no minimum */
        lp_unpack_row8(type, row, n_in, 0, u, d, d + n_in / 16);
        return;
    }
    if (type != LP_Q4_K && type != LP_Q5_K) {
        lp_det8_unpack(type, row, n_in, u, d, m);
        return;
    }
    float *m16 = d + n_in / 16; /* past d's 16-groups; m (d + n_in / 32) is written after d's compacted */
    lp_unpack_row8(type, row, n_in, 0, u, d, m16);
    for (int64_t b = 0; b < n_in / 32; b++) d[b] = d[2 * b]; /* the two 16-groups of a sub-block share it */
    for (int64_t b = 0; b < n_in / 32; b++) m[b] = m16[2 * b];
}
size_t lp_det8_scratch256_bytes(int64_t n_in) { return TW * (w8_bytes(n_in) + (size_t)n_in) + 64 + (size_t)YB_ROWS * YB_LD * 4 + 64; }

/* kinds of weights: their offset taken off (Q4_0, Q5_0, Q8_0 with VNNI), a minimum (Q4_1, Q5_1), signed (Q8_0) */
enum { K_OFF = 0, K_MIN = 1, K_SIGNED = 2, K_G16 = 3 /* Q6_K: signed, a float step per 16-group */ };

/* NH halves (1: rows 16 g .. 16 g + 8 only) x NW weight rows (u[j], wd[j], wm[j]) of lane group g:
 * t[lane ldt + j] = lane's output j (rows 16 g + lane of a row-major buffer, ldt floats a row).  G: quads
 * summed in int16 (no VNNI); sh: log2 of the offset. */
LP_INLINE void tile(const int NH, const int NW, const int KIND, const int G, const uint8_t *const *u, const uint8_t *const *ua,
                    const float *const *wd, const float *const *wm, const lp_x8 *p, int64_t g, int sh, float *t, int64_t ldt) {
    const int64_t nb = p->n_in / 32, nq = p->n_in / 4;
    const int32_t *xq = p->lq + g * NL8 * nq, *qx = p->lqs + g * NL8 * nb;
    const float *dx = p->ld + g * NL8 * nb, *sx = p->lsum + g * NL8 * nb;
    __m256 acc[2][TW];
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < NW; j++) acc[h][j] = _mm256_setzero_ps();
    const int signed_w = KIND == K_SIGNED || KIND == K_G16;
    for (int64_t b = 0; b < nb; b++) {
        __m256i s[2][TW];
#if defined(LP_AVXVNNI)
        if (!signed_w) { /* vpdpbusd: u8 x s8 into int32, no int16 step */
            for (int h = 0; h < NH; h++)
                for (int j = 0; j < NW; j++) s[h][j] = _mm256_setzero_si256();
            for (int k = 0; k < 8; k++) {
                __m256i xv[2];
                for (int h = 0; h < NH; h++) xv[h] = _mm256_load_si256((const __m256i *)(xq + (8 * b + k) * NL8 + 8 * h));
                for (int j = 0; j < NW; j++) {
                    int32_t wq;
                    memcpy(&wq, u[j] + 32 * b + 4 * k, 4);
                    const __m256i wb = _mm256_set1_epi32(wq);
                    for (int h = 0; h < NH; h++) s[h][j] = _mm256_dpbusd_avx_epi32(s[h][j], wb, xv[h]);
                }
            }
        } else
#endif
        {
            const __m256i ones = _mm256_set1_epi16(1);
            for (int k0 = 0; k0 < 8; k0 += G) {
                __m256i a[2][TW];
                for (int k = k0; k < k0 + G; k++) {
                    __m256i xv[2];
                    for (int h = 0; h < NH; h++) xv[h] = _mm256_load_si256((const __m256i *)(xq + (8 * b + k) * NL8 + 8 * h));
                    for (int j = 0; j < NW; j++) {
                        int32_t wq, wqa;
                        memcpy(&wq, u[j] + 32 * b + 4 * k, 4);
                        if (signed_w) memcpy(&wqa, ua[j] + 32 * b + 4 * k, 4);
                        const __m256i wb = _mm256_set1_epi32(wq), wa = signed_w ? _mm256_set1_epi32(wqa) : wb;
                        for (int h = 0; h < NH; h++) {
                            const __m256i pr = _mm256_maddubs_epi16(wa, signed_w ? _mm256_sign_epi8(xv[h], wb) : xv[h]);
                            a[h][j] = k == k0 ? pr : _mm256_add_epi16(a[h][j], pr);
                        }
                    }
                }
                for (int h = 0; h < NH; h++)
                    for (int j = 0; j < NW; j++) {
                        const __m256i m = _mm256_madd_epi16(a[h][j], ones);
                        s[h][j] = k0 == 0 || KIND == K_G16 ? m : _mm256_add_epi32(s[h][j], m);
                    }
                if (KIND == K_G16) /* G = 4: quads k0 .. k0 + 3 are 16-group 2 b + k0 / 4, its own float step */
                    for (int h = 0; h < NH; h++) {
                        const __m256 dv = _mm256_load_ps(dx + NL8 * b + 8 * h);
                        for (int j = 0; j < NW; j++)
                            acc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h][j]), _mm256_mul_ps(_mm256_set1_ps(wd[j][2 * b + k0 / 4]), dv),
                                                        acc[h][j]);
                    }
            }
        }
        if (KIND == K_G16) continue;
        for (int h = 0; h < NH; h++) {
            const __m256 dv = _mm256_load_ps(dx + NL8 * b + 8 * h);
            if (KIND == K_OFF) { /* off x qs, exact: off is a power of two */
                const __m256i c = _mm256_slli_epi32(_mm256_load_si256((const __m256i *)(qx + NL8 * b + 8 * h)), sh);
                for (int j = 0; j < NW; j++) s[h][j] = _mm256_sub_epi32(s[h][j], c);
            }
            for (int j = 0; j < NW; j++)
                acc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h][j]), _mm256_mul_ps(_mm256_set1_ps(wd[j][b]), dv), acc[h][j]);
            if (KIND == K_MIN) {
                const __m256 sv = _mm256_load_ps(sx + NL8 * b + 8 * h);
                for (int j = 0; j < NW; j++) acc[h][j] = _mm256_fmadd_ps(sv, _mm256_set1_ps(wm[j][b]), acc[h][j]);
            }
        }
    }
    if (NW == 2 && ldt) { /* t[lane ldt + j]: rows' pairs (unpack: lanes 0 1 4 5 | 2 3 6 7 of output 0 with output 1) */
        for (int h = 0; h < NH; h++) {
            const __m256 lo = _mm256_unpacklo_ps(acc[h][0], acc[h][1]), hi = _mm256_unpackhi_ps(acc[h][0], acc[h][1]);
            float *th = t + 8 * h * ldt;
            const __m128 l0 = _mm256_castps256_ps128(lo), l1 = _mm256_extractf128_ps(lo, 1);
            const __m128 h0 = _mm256_castps256_ps128(hi), h1 = _mm256_extractf128_ps(hi, 1);
            _mm_storel_pi((__m64 *)(th), l0), _mm_storeh_pi((__m64 *)(th + ldt), l0);
            _mm_storel_pi((__m64 *)(th + 2 * ldt), h0), _mm_storeh_pi((__m64 *)(th + 3 * ldt), h0);
            _mm_storel_pi((__m64 *)(th + 4 * ldt), l1), _mm_storeh_pi((__m64 *)(th + 5 * ldt), l1);
            _mm_storel_pi((__m64 *)(th + 6 * ldt), h1), _mm_storeh_pi((__m64 *)(th + 7 * ldt), h1);
        }
        return;
    }
    float tt[NL8 * TW] __attribute__((aligned(32)));
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < NW; j++) _mm256_store_ps(tt + NL8 * j + 8 * h, acc[h][j]);
    for (int i = 0; i < 8 * NH; i++)
        for (int j = 0; j < NW; j++) t[i * ldt + j] = tt[NL8 * j + i];
}

/* the type's tile for nh halves and nw weight rows */
#define TILE_CASES(KIND, G)                                                                                    \
    switch ((nh - 1) * 2 + nw - 1) {                                                                           \
    case 0: tile(1, 1, KIND, G, u, ua, wd, wm, p, g, sh, t, ldt); break;                                               \
    case 1: tile(1, 2, KIND, G, u, ua, wd, wm, p, g, sh, t, ldt); break;                                               \
    case 2: tile(2, 1, KIND, G, u, ua, wd, wm, p, g, sh, t, ldt); break;                                               \
    default: tile(2, 2, KIND, G, u, ua, wd, wm, p, g, sh, t, ldt); break;                                              \
    }
static void tile_k(int type, int nh, int nw, const uint8_t *const *u, const uint8_t *const *ua, const float *const *wd, const float *const *wm,
                   const lp_x8 *p, int64_t g, float *t, int64_t ldt) {
    const int off = lp_det8_offset(type), sh = off == 8 ? 3 : off == 16 ? 4 : 7;
    if (type == LP_Q4_1 || type == LP_Q4_K) TILE_CASES(K_MIN, 8)
    else if (type == LP_Q5_1 || type == LP_Q5_K) TILE_CASES(K_MIN, 4)
    else if (type == LP_Q6_K) TILE_CASES(K_G16, 4)
    else if (type == LP_Q4_0) TILE_CASES(K_OFF, 8)
    else if (type == LP_Q5_0) TILE_CASES(K_OFF, 4)
#if defined(LP_DET8_Q8_SIGNED)
    else TILE_CASES(K_SIGNED, 1)
#else
    else TILE_CASES(K_OFF, 1)
#endif
}
#undef TILE_CASES

/* ---- one row of Q4_K / Q5_K: 8 outputs at once (det1_x86.c det1_k45's steps on int8): per output
 * a super-block's 8 sub-block sums (lane = sub-block) and scales, transposed to a lane per output,
 * then the float steps in sub-block order ---- */
LP_INLINE __m256i hsum8x8(const __m256i v[8]) { /* lane j: the sum of v[j]'s 8 int32 (exact) */
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}

LP_INLINE void tr8(__m256 r[8]) { /* r[t] lane o <- r[o] lane t */
    __m256 t[8], v[8];
    for (int i = 0; i < 4; i++) t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    for (int i = 0; i < 2; i++) {
        v[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44), v[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        v[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44), v[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) r[i] = _mm256_permute2f128_ps(v[i], v[4 + i], 0x20), r[4 + i] = _mm256_permute2f128_ps(v[i], v[4 + i], 0x31);
}

LP_INLINE __m256i dot32(__m256i u, __m256i x) { /* the block's 32 products, 4 to an int32 lane (u <= 31: exact) */
#if defined(LP_AVXVNNI)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
#endif
}

LP_INLINE void row_k45(const int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                       int accumulate) {
    const int bb = type == LP_Q4_K ? 144 : 176;
    const int64_t nsb = p->n_in / 256, rb = bb * nsb;
    for (int64_t o = o0; o < o1; o += 8) {
        const uint8_t *rows[8];
        lp_det8_next nx;
        const int nw = lp_det8_rows8(w, o, o1, n_out, rb, nsb, rows, &nx);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t sb = 0; sb < nsb; sb++) {
            lp_det8_prefetch(&nx, sb);
            const int8_t *xq = p->q + 256 * sb;
            __m256 g[8], dv[8], mv[8];
            for (int j = 0; j < 8; j++) {
                const uint8_t *b = rows[j] + sb * bb, *qs = b + (type == LP_Q4_K ? 16 : 48);
                const __m128i sm = lp_k45_sc(b + 4);
                const __m128 dd = f16x2_ps(b);
                dv[j] = _mm256_mul_ps(_mm256_broadcastss_ps(dd), lp_u8x8(sm));
                mv[j] = _mm256_xor_ps(_mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)), lp_u8x8(_mm_unpackhi_epi64(sm, sm))),
                                      _mm256_set1_ps(-0.0f));
                __m256i hb = type == LP_Q5_K ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256(), v[8];
                for (int k = 0; k < 4; k++) {
                    __m256i wa, wb;
                    k45_pair(type, qs + 32 * k, &hb, &wa, &wb);
                    v[2 * k] = dot32(wa, _mm256_loadu_si256((const __m256i *)(xq + 64 * k)));
                    v[2 * k + 1] = dot32(wb, _mm256_loadu_si256((const __m256i *)(xq + 64 * k + 32)));
                }
                g[j] = _mm256_cvtepi32_ps(hsum8x8(v));
            }
            tr8(g), tr8(dv), tr8(mv);
            for (int t = 0; t < 8; t++) {
                const int64_t b = 8 * sb + t;
                acc = _mm256_fmadd_ps(g[t], _mm256_mul_ps(dv[t], _mm256_set1_ps(p->d[b])), acc);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(p->sum[b]), mv[t], acc);
            }
        }
        lp_det8_store8(y + o, acc, nw, accumulate);
    }
}

/* one row of Q6_K: per output a super-block half's 8 16-group sums (lane = 16-group) and d sc */
LP_INLINE __m256i dot_signed(__m256i q, __m256i x) { /* 32 products of signed q, 4 to an int32 lane (|q| <= 32: exact) */
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q)), _mm256_set1_epi16(1));
}

static void row_q6k(const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y, int accumulate) {
    const int64_t nsb = p->n_in / 256, rb = 210 * nsb;
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t o = o0; o < o1; o += 8) {
        const uint8_t *rows[8];
        lp_det8_next nx;
        const int nw = lp_det8_rows8(w, o, o1, n_out, rb, nsb, rows, &nx);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t sb = 0; sb < nsb; sb++) {
            lp_det8_prefetch(&nx, sb);
            for (int n = 0; n < 2; n++) { /* 16-groups 8 n .. 8 n + 7 */
                const int8_t *xq = p->q + 256 * sb + 128 * n;
                __m256 g[8], dv[8];
                for (int j = 0; j < 8; j++) {
                    const uint8_t *b = rows[j] + sb * 210;
                    dv[j] = _mm256_mul_ps(_mm256_set1_ps(lp_f16_to_f32(lp_rd16(b + 208))),
                                          _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 192 + 8 * n)))));
                    __m256i q[4], v[4];
                    q6k_half(b + 64 * n, b + 128 + 32 * n, q);
                    for (int k = 0; k < 4; k++)
                        v[k] = dot_signed(_mm256_sub_epi8(q[k], _mm256_set1_epi8(32)), _mm256_loadu_si256((const __m256i *)(xq + 32 * k)));
                    /* lanes 0-3 of v[k]: 16-group 2 k, lanes 4-7: 2 k + 1 -> [g0 g2 g4 g6 | g1 g3 g5 g7] -> in order */
                    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
                    g[j] = _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(h, order));
                }
                tr8(g), tr8(dv);
                for (int t = 0; t < 8; t++)
                    acc = _mm256_fmadd_ps(g[t], _mm256_mul_ps(dv[t], _mm256_set1_ps(p->d[8 * sb + 4 * n + t / 2])), acc);
            }
        }
        lp_det8_store8(y + o, acc, nw, accumulate);
    }
}

void lp_det8_row256_k45(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                        int accumulate) {
    if (type == LP_Q6_K)
        row_q6k(w, o0, o1, n_out, p, y, accumulate);
    else if (type == LP_Q4_K)
        row_k45(LP_Q4_K, w, o0, o1, n_out, p, y, accumulate);
    else
        row_k45(LP_Q5_K, w, o0, o1, n_out, p, y, accumulate);
}

/* y rows 0 .. n, outputs o0 .. o0 + nc (nc <= 16) (+)= yb's rows: each row's strip written once (a
 * tile's 2 columns straight into y touched rows ldy apart, often a multiple of 4 KiB: the same L1 sets,
 * each line read for ownership again per tile).  (Streaming the logits' rows around the cache was
 * tried: no gain at B=16, -t 1.) */
static void put_rows(const float *yb, int64_t n, float *y, int64_t ldy, int64_t o0, int64_t nc, int accumulate) {
    const __m256i k0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nc), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i k1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nc), _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15));
    for (int64_t r = 0; r < n; r++) {
        float *yr = y + r * ldy + o0;
        __m256 a = _mm256_load_ps(yb + r * YB_LD), b = _mm256_load_ps(yb + r * YB_LD + 8);
        if (nc == 16) {
            if (accumulate) a = _mm256_add_ps(a, _mm256_loadu_ps(yr)), b = _mm256_add_ps(b, _mm256_loadu_ps(yr + 8));
            _mm256_storeu_ps(yr, a), _mm256_storeu_ps(yr + 8, b);
        } else {
            if (accumulate) a = _mm256_add_ps(a, _mm256_maskload_ps(yr, k0)), b = _mm256_add_ps(b, _mm256_maskload_ps(yr + 8, k1));
            _mm256_maskstore_ps(yr, k0, a), _mm256_maskstore_ps(yr + 8, k1, b);
        }
    }
}

void lp_det8_chunk256(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *p, float *y, int64_t ldy,
                      int accumulate, void *scratch) {
    const int64_t n_in = p->n_in, nb = n_in / 32, n = p->n;
    const int64_t rb = type == LP_Q4_K ? 144 * (n_in / 256) : type == LP_Q5_K ? 176 * (n_in / 256) : type == LP_Q6_K ? 210 * (n_in / 256)
                                                                                                : bytes32(type) * nb;
    uint8_t *u[TW], *ua[TW]; /* ua: |u| of the signed forms (Q8_0 signed, Q6_K), vpmaddubsw's unsigned side */
    float *wd[TW], *wm[TW];
    for (int j = 0; j < TW; j++) {
        u[j] = (uint8_t *)al32((char *)scratch + j * w8_bytes(n_in));
        wd[j] = (float *)(u[j] + n_in), wm[j] = wd[j] + nb; /* (unpack: m16 at wd + 2 nb first) */
        ua[j] = (uint8_t *)scratch + TW * w8_bytes(n_in) + j * n_in;
    }
    const int signed_w = type == LP_Q6_K || (type == LP_Q8_0 && lp_det8_offset(type) == 0);
    float *yb = (float *)(((uintptr_t)((char *)scratch + TW * (w8_bytes(n_in) + n_in) + 64) + 63) & ~(uintptr_t)63); /* [YB_ROWS][YB_LD] */
    const int buffered = p->n_grp * NL8 <= YB_ROWS && o1 - o0 <= YB_LD;
    float t[NL8 * TW];
    for (int64_t o = o0; o < o1; o += TW) {
        const int nw = (int)(o1 - o < TW ? o1 - o : TW);
        for (int j = 0; j < nw; j++) {
            unpack(type, w + (o + j) * rb, n_in, u[j], wd[j], wm[j]);
            if (signed_w)
                for (int64_t k = 0; k < n_in; k += 32)
                    _mm256_storeu_si256((__m256i *)(ua[j] + k), _mm256_abs_epi8(_mm256_loadu_si256((const __m256i *)(u[j] + k))));
        }
        lp_det8_prefetch_rows(w, o + TW, o + 2 * TW < o1 ? o + 2 * TW : o1, rb); /* the next rows come in while these compute */
        for (int64_t g = 0; g < p->n_grp; g++) {
            const int64_t rows = n - NL8 * g < NL8 ? n - NL8 * g : NL8;
            if (buffered) {
                tile_k(type, rows > 8 ? 2 : 1, nw, (const uint8_t *const *)u, (const uint8_t *const *)ua, (const float *const *)wd, (const float *const *)wm, p,
                       g, yb + NL8 * g * YB_LD + (o - o0), YB_LD);
                continue;
            }
            tile_k(type, rows > 8 ? 2 : 1, nw, (const uint8_t *const *)u, (const uint8_t *const *)ua, (const float *const *)wd, (const float *const *)wm, p,
                   g, t, TW);
            for (int64_t i = 0; i < rows; i++)
                for (int j = 0; j < nw; j++) {
                    float *yo = y + (NL8 * g + i) * ldy + o + j;
                    *yo = accumulate ? *yo + t[TW * i + j] : t[TW * i + j];
                }
        }
    }
    if (buffered) put_rows(yb, n, y, ldy, o0, o1 - o0, accumulate);
}
#endif
