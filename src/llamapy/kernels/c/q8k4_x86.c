/* The Q4_K / Q6_K products of a batched decode's 5..63 rows against Q8_K activations (x86 AVX2
 * without VNNI, mm.c q8k_chunk), with fewer multiplies per MAC than the one-row kernels' order
 * (row1q8k_x86.c), which Q6_K's batched rows took before (each super-block decoded once for all
 * rows): there each vpmaddubsw (32 MACs) was followed by a vpmaddwd by its sub-block's scale,
 * two multiplies per 32 MACs, no fewer than the int16 lanes' one vpmaddwd per 16.  Here four weight
 * rows are interleaved 8 values at a time (a vector: 8 bytes of row 0, of row 1, 2, 3; as
 * llama.cpp's repack.cpp block_q4_Kx8 interleaves 8 rows), so the 8 activation bytes are one
 * vpbroadcastq and the int16 pairs of the vectors of one sub-block add up in int16 (Q4_K: 4
 * vectors, a lane |sum| <= 8 * 15 * 127 = 15240; Q6_K: 2 vectors, 4 * 63 * 127 = 32004) before
 * ONE vpmaddwd by the four rows' scales: 5 multiplies per 128 MACs where those took 8.  Each
 * super-block of the four rows is interleaved once (a qword transpose:
 * 8 shuffles per 4 vectors) and read from L1 by blocks of 8 activation rows (q8k4_act).  The
 * int32 sums keep two lanes per weight row (lanes 2v, 2v + 1), scaled per super-block by that
 * row's d (Q4_K also its dmin times the minimums against bs8's sums per 32; Q6_K's -32 through
 * bs8's sums per 16) and the activation row's d8, and added up at the end. */
#include "q8k4_x86.h"

#include "blocks_x86.h"

#if defined(LP_AVX2) || defined(LP_AVX512)

/* One super-block of four weight rows, interleaved: Q4_K w[4 s + k] (sub-block s of 32 values,
 * values 8k .. 8k + 7 of each row), Q6_K w[2 g + k] (sub-block g of 16); sc[s or g]: each row's
 * scale in its four int16 lanes (4v .. 4v + 3); m[]: the corrections' factors (Q4_K: the mins
 * of sub-blocks 0-3, 4-7; Q6_K: the scales of 0-3, 4-7, 8-11, 12-15, four per row); d: each row's
 * d in lanes 2v, 2v + 1, dm: its dmin (Q4_K). */
typedef struct {
    __m256i w[32], sc[16], m[4];
    __m256 d, dm;
} q8k4_sb;

/* a[0..4): 32 bytes of rows 0..3 (qwords: values 0-7, 8-15 | 16-23, 24-31); o[k]: values 8k .. 8k + 7 of every row */
LP_INLINE void qword_transpose(const __m256i *a, __m256i *o) {
    const __m256i t0 = _mm256_unpacklo_epi64(a[0], a[1]), t1 = _mm256_unpackhi_epi64(a[0], a[1]);
    const __m256i t2 = _mm256_unpacklo_epi64(a[2], a[3]), t3 = _mm256_unpackhi_epi64(a[2], a[3]);
    o[0] = _mm256_permute2x128_si256(t0, t2, 0x20);
    o[1] = _mm256_permute2x128_si256(t1, t3, 0x20);
    o[2] = _mm256_permute2x128_si256(t0, t2, 0x31);
    o[3] = _mm256_permute2x128_si256(t1, t3, 0x31);
}

/* 4 x 8 bytes (row v's at v, v = 0..3) in lanes [row 0 | row 1], [row 2 | row 3] */
LP_INLINE __m256i rows_lanes(__m128i r01, __m128i r23) { return _mm256_setr_m128i(r01, r23); }

/* the int16 lanes of each 64-bit group of 4: byte i of row v's 8 (b0 .. b0 + 3 as the groups
 * go) zero- (Q4_K) or sign-extended (Q6_K: in the high byte, then >> 8) */
LP_INLINE __m256i spread(__m256i rows8, __m256i ctl, int sign) {
    const __m256i t = _mm256_shuffle_epi8(rows8, ctl);
    return sign ? _mm256_srai_epi16(t, 8) : t;
}

/* control: int16 lanes 0-3 from byte a (of row 0 / 2), 4-7 from byte 8 + a (row 1 / 3); hi: in the high byte */
LP_INLINE __m256i rep_ctl(int a, int hi) {
    const short lo = (short)(hi ? ((a << 8) | 0x80) : (0x8000 | a)), l1 = (short)(hi ? (((8 + a) << 8) | 0x80) : (0x8000 | (8 + a)));
    return _mm256_setr_epi16(lo, lo, lo, lo, l1, l1, l1, l1, lo, lo, lo, lo, l1, l1, l1, l1);
}

/* control: int16 lanes 0-3 from bytes a .. a + 3 (row 0 / 2), 4-7 from 8 + a .. (row 1 / 3) */
LP_INLINE __m256i run_ctl(int a, int hi) {
    short c[8];
    for (int i = 0; i < 8; i++) {
        const int byte = (i < 4 ? 0 : 8) + a + (i & 3);
        c[i] = (short)(hi ? ((byte << 8) | 0x80) : (0x8000 | byte));
    }
    return _mm256_setr_epi16(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
}

LP_INLINE void q4k4_pack(const uint8_t *const *b, q8k4_sb *o) {
    const __m256i m4 = _mm256_set1_epi8(15);
    __m128i a[4];
    uint32_t dm[4];
    for (int v = 0; v < 4; v++) a[v] = lp_k45_sc(b[v] + 4), memcpy(&dm[v], b[v], 4); /* 8 scales | 8 mins */
    const __m256i sc = rows_lanes(_mm_unpacklo_epi64(a[0], a[1]), _mm_unpacklo_epi64(a[2], a[3]));
    const __m256i mn = rows_lanes(_mm_unpackhi_epi64(a[0], a[1]), _mm_unpackhi_epi64(a[2], a[3]));
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) o->sc[s] = spread(sc, rep_ctl(s, 0), 0);
    o->m[0] = spread(mn, run_ctl(0, 0), 0), o->m[1] = spread(mn, run_ctl(4, 0), 0);
    const __m256 f = _mm256_cvtph_ps(_mm_setr_epi32((int)dm[0], (int)dm[1], (int)dm[2], (int)dm[3])); /* d, dmin per row */
    o->d = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6));
    o->dm = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(1, 1, 3, 3, 5, 5, 7, 7));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) { /* bytes 32j..: sub-block 2j the low nibbles, 2j + 1 the high */
        __m256i lo[4], hi[4];
        for (int v = 0; v < 4; v++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b[v] + 16 + 32 * j));
            lo[v] = _mm256_and_si256(q, m4), hi[v] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }
        qword_transpose(lo, o->w + 8 * j);
        qword_transpose(hi, o->w + 8 * j + 4);
    }
}

LP_INLINE void q6k4_pack(const uint8_t *const *b, q8k4_sb *o) {
    __m128i s[4];
    uint16_t d[4];
    for (int v = 0; v < 4; v++) s[v] = _mm_loadu_si128((const __m128i *)(b[v] + 192)), memcpy(&d[v], b[v] + 208, 2);
    const __m256i sl = rows_lanes(_mm_unpacklo_epi64(s[0], s[1]), _mm_unpacklo_epi64(s[2], s[3])); /* scales 0..7 */
    const __m256i sh = rows_lanes(_mm_unpackhi_epi64(s[0], s[1]), _mm_unpackhi_epi64(s[2], s[3])); /* 8..15 */
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) o->sc[g] = spread(sl, rep_ctl(g, 1), 1), o->sc[8 + g] = spread(sh, rep_ctl(g, 1), 1);
    o->m[0] = spread(sl, run_ctl(0, 1), 1), o->m[1] = spread(sl, run_ctl(4, 1), 1);
    o->m[2] = spread(sh, run_ctl(0, 1), 1), o->m[3] = spread(sh, run_ctl(4, 1), 1);
    o->d = _mm256_cvtph_ps(_mm_setr_epi16((short)d[0], (short)d[0], (short)d[1], (short)d[1], (short)d[2], (short)d[2],
                                          (short)d[3], (short)d[3]));
    o->dm = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
        __m256i h[4][4];
        for (int v = 0; v < 4; v++) q6k_half(b[v] + 64 * n, b[v] + 128 + 32 * n, h[v]);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) { /* values 128n + 32j ..: sub-blocks 8n + 2j, 8n + 2j + 1 */
            const __m256i a[4] = {h[0][j], h[1][j], h[2][j], h[3][j]};
            qword_transpose(a, o->w + 16 * n + 4 * j);
        }
    }
}

LP_INLINE __m256i bcast8(const int8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return _mm256_set1_epi64x(v);
}

/* R (1, 2, 4, 8) activation rows x[0..R) (a super-block's 256 int8 each, bs their sums per 16)
 * against o's four rows: acc[u] += d8[u] (d * isum - dmin * msum) per lane (Q4_K), d8[u] d (isum -
 * 32 corr) (Q6_K).  A sub-block's weight vectors and scale are loaded into registers once and
 * multiplied by all R rows, whose int32 sums is[0..R) stay in registers (4 + 1 + 8 + 2 of the 16
 * ymm at R = 8): 9 vector ALU uops per 128 MACs (Q4_K) and the activations' vpbroadcastq loads,
 * where two rows a pass reloaded the weights per row pair and GCC spilled the sums. */
LP_INLINE void q8k4_act(const int q4, const int R, const q8k4_sb *o, const int8_t *const *x, const int16_t *const *bs,
                        const float *d8, __m256 *acc) {
    __m256i is[8];
#pragma GCC unroll 8
    for (int u = 0; u < R; u++) is[u] = _mm256_setzero_si256();
    if (q4) {
#pragma GCC unroll 1
        for (int s = 0; s < 8; s++) { /* (not unrolled: GCC would reassociate each row's 8 sums into a tree, spilled) */
            const __m256i w0 = o->w[4 * s], w1 = o->w[4 * s + 1], w2 = o->w[4 * s + 2], w3 = o->w[4 * s + 3], sc = o->sc[s];
#pragma GCC unroll 8
            for (int u = 0; u < R; u++) {
                const int8_t *xs = x[u] + 32 * s;
                __m256i p = _mm256_maddubs_epi16(w0, bcast8(xs));
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w1, bcast8(xs + 8)));
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w2, bcast8(xs + 16)));
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w3, bcast8(xs + 24)));
                is[u] = _mm256_add_epi32(is[u], _mm256_madd_epi16(p, sc));
            }
        }
#pragma GCC unroll 8
        for (int u = 0; u < R; u++) {
            const __m128i b8 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bs[u]), _mm_loadu_si128((const __m128i *)(bs[u] + 8)));
            const __m256i ms = _mm256_add_epi32(_mm256_madd_epi16(o->m[0], _mm256_broadcastq_epi64(b8)),
                                                _mm256_madd_epi16(o->m[1], _mm256_broadcastq_epi64(_mm_unpackhi_epi64(b8, b8))));
            const __m256 t = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), o->dm, _mm256_mul_ps(_mm256_cvtepi32_ps(is[u]), o->d));
            acc[u] = _mm256_fmadd_ps(t, _mm256_set1_ps(d8[u]), acc[u]);
        }
    } else {
#pragma GCC unroll 1
        for (int g = 0; g < 16; g++) {
            const __m256i w0 = o->w[2 * g], w1 = o->w[2 * g + 1], sc = o->sc[g];
#pragma GCC unroll 8
            for (int u = 0; u < R; u++) {
                const int8_t *xs = x[u] + 16 * g;
                const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast8(xs)), _mm256_maddubs_epi16(w1, bcast8(xs + 8)));
                is[u] = _mm256_add_epi32(is[u], _mm256_madd_epi16(p, sc));
            }
        }
#pragma GCC unroll 8
        for (int u = 0; u < R; u++) {
            /* the sums per 16 four at a time, each qword broadcast from memory (a load, no shuffle port) */
            __m256i c = _mm256_madd_epi16(o->m[0], bcast8((const int8_t *)bs[u]));
            c = _mm256_add_epi32(c, _mm256_madd_epi16(o->m[1], bcast8((const int8_t *)(bs[u] + 4))));
            c = _mm256_add_epi32(c, _mm256_madd_epi16(o->m[2], bcast8((const int8_t *)(bs[u] + 8))));
            c = _mm256_add_epi32(c, _mm256_madd_epi16(o->m[3], bcast8((const int8_t *)(bs[u] + 12))));
            const __m256i si = _mm256_sub_epi32(is[u], _mm256_slli_epi32(c, 5));
            acc[u] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(si), o->d), _mm256_set1_ps(d8[u]), acc[u]);
        }
    }
}

/* Activation rows rows[t .. t + R) of super-block i against o (q8k4_act). */
typedef struct {
    const int8_t *q8;   /* the row's Q8_K values */
    const int16_t *bs8; /* its sums per 16 */
    const float *d8;    /* its scales per super-block */
} q8k4_row;

/* Activation rows xs[0 .. R) of super-block i against o (q8k4_act). */
LP_INLINE void q8k4_block(const int q4, const int R, const q8k4_sb *o, const q8k4_row *xs, int64_t i, __m256 *acc) {
    const int8_t *x[8];
    const int16_t *bs[8];
    float d8[8];
#pragma GCC unroll 8
    for (int u = 0; u < R; u++) x[u] = xs[u].q8 + 256 * i, bs[u] = xs[u].bs8 + 16 * i, d8[u] = xs[u].d8[i];
    q8k4_act(q4, R, o, x, bs, d8, acc);
}

LP_INLINE void q8k4_run(const int q4, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                        float *y, int nw, const uint8_t *pf) {
    __m256 acc[LP_Q8K_ROWS];
    for (int t = 0; t < nr; t++) acc[t] = _mm256_setzero_ps();
    const int64_t bb = q4 ? 144 : 210;
    q8k4_row xs[LP_Q8K_ROWS];
    for (int t = 0; t < nr; t++)
        xs[t] = (q8k4_row){xr->q8 + rows[t] * xr->n_in, xr->bs8 + rows[t] * nsb * 16, xr->d8 + rows[t] * nsb};
    for (int64_t i = 0; i < nsb; i++) {
        if (pf) /* the next pass's 4 nsb blocks, 4 bb bytes per super-block of this one */
            for (const uint8_t *p = pf + 4 * bb * i, *e = p + 4 * bb; p < e; p += 64) LP_PREFETCH_W(p);
        q8k4_sb o;
        const uint8_t *b[4] = {w[0] + i * bb, w[1] + i * bb, w[2] + i * bb, w[3] + i * bb};
        if (q4) q4k4_pack(b, &o);
        else q6k4_pack(b, &o);
        int t = 0; /* rows in blocks of 8, then 4, 2, 1 */
        for (; t + 8 <= nr; t += 8) q8k4_block(q4, 8, &o, xs + t, i, acc + t);
        if (t + 4 <= nr) q8k4_block(q4, 4, &o, xs + t, i, acc + t), t += 4;
        if (t + 2 <= nr) q8k4_block(q4, 2, &o, xs + t, i, acc + t), t += 2;
        if (t < nr) q8k4_block(q4, 1, &o, xs + t, i, acc + t);
    }
    for (int t = 0; t < nr; t++) {
        float f[8];
        _mm256_storeu_ps(f, acc[t]);
        for (int v = 0; v < nw; v++) y[v * nr + t] = f[2 * v] + f[2 * v + 1];
    }
}

void lp_q8k4_rows_pf(int type, int nw, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                     float *y, const uint8_t *pf) {
    const uint8_t *w4[4];
    for (int v = 0; v < 4; v++) w4[v] = w[v < nw ? v : nw - 1]; /* fewer than four: the last repeated, its sums dropped */
    if (type == LP_Q4_K) q8k4_run(1, w4, nsb, xr, rows, nr, y, nw, pf);
    else q8k4_run(0, w4, nsb, xr, rows, nr, y, nw, pf);
}

void lp_q8k4_rows(int type, int nw, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                  float *y) {
    lp_q8k4_rows_pf(type, nw, w, nsb, xr, rows, nr, y, NULL);
}

#else
void lp_q8k4_rows_pf(int type, int nw, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                     float *y, const uint8_t *pf) {
    (void)type, (void)nw, (void)w, (void)nsb, (void)xr, (void)rows, (void)nr, (void)y, (void)pf;
}
void lp_q8k4_rows(int type, int nw, const uint8_t *const *w, int64_t nsb, const lp_xrows *xr, const int64_t *rows, int nr,
                  float *y) {
    (void)type, (void)nw, (void)w, (void)nsb, (void)xr, (void)rows, (void)nr, (void)y;
}
#endif
